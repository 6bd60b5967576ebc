/* offload-shim run keeps the program's signal dispositions (tests/test_run_signals.py).
 * argv[1]: what to do after a first target region ran:
 *   host / target   raise(SIGINT) in host code / inside a target region
 *   term            kill(getpid(), SIGTERM)
 *   pipe            write to a pipe whose reader is gone (SIGPIPE)
 *   wait / twait    print "ready", then sleep in host code / inside a target region
 *                   (for a SIGINT sent from outside)
 *   dispositions    print every signal's disposition (DFL, IGN or handler) */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void ready(void) { printf("ready\n"); fflush(stdout); }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "dispositions";
  int x = 0;
#pragma omp target map(tofrom : x)
  { x = 1; }
  printf("offloaded %d\n", x);
  fflush(stdout);
  if (!strcmp(mode, "host")) {
    raise(SIGINT);
  } else if (!strcmp(mode, "target")) {
#pragma omp target map(tofrom : x)
    { raise(SIGINT); x = 2; }
  } else if (!strcmp(mode, "term")) {
    kill(getpid(), SIGTERM);
  } else if (!strcmp(mode, "pipe")) {
    int fd[2];
    if (pipe(fd) == 0) {
      close(fd[0]);
      (void)!write(fd[1], "x", 1);
    }
  } else if (!strcmp(mode, "wait")) {
    ready();
    for (int i = 0; i < 60; i++) sleep(1);
  } else if (!strcmp(mode, "twait")) {
#pragma omp target map(tofrom : x)
    { ready(); for (int i = 0; i < 60; i++) sleep(1); }
  } else {
    for (int s = 1; s < NSIG; s++) {
      struct sigaction sa;
      if (sigaction(s, NULL, &sa) != 0) continue;
      printf("%d %s\n", s, sa.sa_handler == SIG_DFL ? "DFL" : sa.sa_handler == SIG_IGN ? "IGN" : "handler");
    }
  }
  printf("survived %d\n", x);
  return 0;
}
