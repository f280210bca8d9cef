/* SPDX-License-Identifier: MIT */
/* picolm-sandboxed: a client that confines itself before it generates. It connects to
 * picolmd, calls picolm_sandbox_enter() (EPERM mode, or kill mode with --kill), shows that it
 * can no longer open files, create sockets or run programs, and then still streams a
 * generation through the rings it already holds.
 *   picolm-sandboxed [--socket PATH] [--kill] [PROMPT] */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "picolm.h"
#include "picolm_sandbox.h"

static int on_chunk(void *user, const struct picolm_chunk *chunk) {
    (void)user;
    fwrite(chunk->text, 1, chunk->text_len, stdout);
    fflush(stdout);
    return 0;
}

/* EPERM mode only: each forbidden call must fail with EPERM (kill mode would end us here). */
static int show_confinement(void) {
    int bad = 0;
    errno = 0;
    int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
    printf("open(\"/etc/passwd\"): %s\n", fd < 0 ? strerror(errno) : "opened (!)");
    bad |= fd >= 0 || errno != EPERM;
    errno = 0;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    printf("socket(AF_INET): %s\n", s < 0 ? strerror(errno) : "created (!)");
    bad |= s >= 0 || errno != EPERM;
    char *argv[] = {"/bin/sh", "-c", "echo escaped", NULL};
    char *envp[] = {NULL};
    errno = 0;
    int e = execve("/bin/sh", argv, envp);
    printf("execve(\"/bin/sh\"): %s\n", e < 0 ? strerror(errno) : "ran (!)");
    bad |= errno != EPERM;
    return bad;
}

int main(int argc, char **argv) {
    const char *socket_path = NULL;
    const char *prompt = "Once upon a time";
    unsigned flags = PICOLM_SANDBOX_ERRNO;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc)
            socket_path = argv[++i];
        else if (!strcmp(argv[i], "--kill"))
            flags = PICOLM_SANDBOX_KILL;
        else
            prompt = argv[i];
    }

    char err[256];
    picolm_client *c;
    int r = picolm_connect_ex(socket_path, &c, err, sizeof(err));
    if (r != PICOLM_OK) {
        fprintf(stderr, "picolm-sandboxed: %s (%s)\n", picolm_strerror(r), err);
        return r == PICOLM_E_UNREACHABLE ? 3 : 1;
    }

    /* From here on: no files, no sockets, no programs; only the broker connection. */
    r = picolm_sandbox_enter(flags, NULL, 0);
    if (r != PICOLM_OK) {
        fprintf(stderr, "picolm-sandboxed: sandbox: %s (%s)\n", picolm_strerror(r),
                strerror(errno));
        picolm_close(c);
        return 1;
    }
    printf("sandboxed (%s mode)\n", flags & PICOLM_SANDBOX_KILL ? "kill" : "EPERM");
    if (!(flags & PICOLM_SANDBOX_KILL) && show_confinement() != 0) {
        fprintf(stderr, "picolm-sandboxed: the sandbox let something through\n");
        picolm_close(c);
        return 1;
    }

    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    p.prompt = prompt;
    p.max_tokens = 32;
    p.sampling.temperature = 0;
    struct picolm_result res = {.size = sizeof(res)};
    printf("%s", prompt);
    r = picolm_generate(c, &p, on_chunk, NULL, &res);
    if (r != PICOLM_OK) {
        fprintf(stderr, "\npicolm-sandboxed: %s: %s\n", picolm_strerror(r), picolm_last_error(c));
        picolm_close(c);
        return 1;
    }
    printf("\n[%u tokens generated inside the sandbox]\n", res.generated_tokens);
    picolm_close(c);
    return 0;
}
