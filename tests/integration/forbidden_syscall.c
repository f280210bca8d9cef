/* SPDX-License-Identifier: MIT */
/* Preloaded into picolmd by test_policy_broker: on SIGUSR1 it makes a system call that is not
 * in the broker's seccomp allow-list (getppid), which must kill the running broker with
 * SIGSYS. The handler is installed by a constructor, before the daemon locks down. */
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void on_usr1(int sig) {
    (void)sig;
    (void)syscall(SYS_getppid);
}

__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGUSR1, &sa, NULL);
}
