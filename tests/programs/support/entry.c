/* Library mode of the conformance programs (tests/conformance.py): linked into
 * lib<program>.so next to the program's own object.  int64_t osh_program_run(void) calls
 * the program's main() with the arguments in $OSH_PROGRAM_ARGS (separated by \x1f) and
 * flushes stdout, so a ctypes host or `offload-shim run-library --call osh_program_run`
 * runs the program inside a library.  The declaration makes main hidden in the library:
 * the call binds to the program's main, never to the host executable's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int main(int, char **, char **) __attribute__((visibility("hidden")));
extern char **environ;

int64_t osh_program_run(void)
{
  static char *argv[64];
  static char buf[4096];
  const char *raw = getenv("OSH_PROGRAM_ARGS");
  int argc = 0;
  argv[argc++] = "program";
  if (raw && *raw) {
    strncpy(buf, raw, sizeof buf - 1);
    for (char *p = buf; p && argc < 63;) {
      argv[argc++] = p;
      p = strchr(p, '\x1f');
      if (p)
        *p++ = '\0';
    }
  }
  argv[argc] = NULL;
  int rc = main(argc, argv, environ);
  fflush(stdout);
  return rc;
}
