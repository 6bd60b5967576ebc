"""A Python host whose daemon threads keep offloading (``sum8``)
while the main thread ends the interpreter with ``sys.exit(4)``: usage
``daemon_host.py LIBRARY [THREADS] [SECONDS]``."""
import ctypes
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2


def kernels():
    while True:
        if lib.sum8(1) != 28:
            print("wrong sum", flush=True)


for i in range(threads):
    threading.Thread(target=kernels, daemon=True).start()
time.sleep(delay)
print("main done")
sys.exit(4)
