"""Process safety: what keeps a crashing library, a killed child or a plugin's
leftovers from hurting the process or the machine.

* :mod:`.isolation` -- a library's loader work (an image's test ``dlopen``, a
  plugin's first load, a compiled library's constructors) tried in a child
  process before this process does it;
* :mod:`.leftovers` -- what plugins and libomp leave in ``/tmp`` and
  ``/dev/shm`` (image copies, registration segments) and their removal;
* :mod:`.verdicts` -- the outcomes of those checks, stored by content hash
  across runs.

Importing this package does no work.
"""
