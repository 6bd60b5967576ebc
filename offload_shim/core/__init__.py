"""The runtime core: :class:`Runtime` (plugins, devices, image registry, teardown order),
:class:`Device` (one device's state machine) and the images with their address maps."""
