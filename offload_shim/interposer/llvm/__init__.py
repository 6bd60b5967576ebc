"""The LLVM wing of the interposer: libomptarget's host side (LLVM ``offload/`` /
``openmp/libomptarget/src``), one module per upstream source file or subject.

======================  ==============================================================
:mod:`.interface`       ``interface.cpp``: the entry points; :class:`Interposer` (the
                        callback table, close), :func:`interpose`
:mod:`.plugin_manager`  ``rtl.cpp`` ``registerLib`` / ``unregisterLib`` under ``RTLsMtx``,
                        ``initLibrary``: the device list (a part of :class:`Interposer`)
:mod:`.policy`          ``omptarget.cpp``: ``OMP_TARGET_OFFLOAD``, ``checkDeviceAndCtors``,
                        ``handleTargetOutcome`` (a part of :class:`Interposer`)
:mod:`.rtl`             ``rtl.cpp``: ``__tgt_bin_desc`` decoding, which plugin takes an
                        image, device numbering
:mod:`.maptable`        ``device.h``: the rows (``HostDataToTargetTy``) and the table
                        (``HostDataToTargetMap``, ``lookupMapping``)
:mod:`.mapping`         ``device.cpp``: ``DeviceTy``, ``getTargetPointer``,
                        ``getTgtPtrBegin``, ``associatePtr``
:mod:`.transfer`        ``device.cpp`` ``submitData`` / ``retrieveData`` and the shadow
                        pointers of ``ptr_and_obj`` maps
:mod:`.omptarget`       ``omptarget.cpp``: map types, ``targetDataBegin/End/Update``
:mod:`.launch`          ``omptarget.cpp`` ``target()``: the kernel launch
:mod:`.plan`            the cheap path of the constructs compiled code runs most: plans
                        and the dispatch of construct frames
:mod:`.plan_data`       its ``targetDataBegin`` / ``targetDataEnd`` / ``targetDataUpdate``
:mod:`.plan_target`     its ``target()`` (``processDataBefore/AfterLaunch``)
:mod:`.api`             ``api.cpp``: ``omp_target_alloc`` & co.
:mod:`.diag`            libomptarget's diagnostics, in the words of the program's release
:mod:`.profile`         what differs between libomptarget 16, 19.1 and 22.1
======================  ==============================================================

Imports nothing itself: the embedded runtime of ``offload-shim run`` loads only the
modules it uses.
"""
