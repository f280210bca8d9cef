/* SPDX-License-Identifier: MIT */
/* picolm-hello: the smallest useful libpicolm program. Connects to picolmd, prints the model's
 * name, streams a generation for the prompt given on the command line (callback form), then
 * the same prompt again through the iterator form, greedy both times, and prints the timings.
 *   picolm-hello [--socket PATH] [PROMPT] */
#include <stdio.h>
#include <string.h>

#include "picolm.h"

static int on_chunk(void *user, const struct picolm_chunk *chunk) {
    (void)user;
    fwrite(chunk->text, 1, chunk->text_len, stdout);
    fflush(stdout);
    return 0; /* non-zero would cancel the generation */
}

int main(int argc, char **argv) {
    const char *socket_path = NULL; /* NULL: $PICOLM_SOCKET or /run/picolm/picolm.sock */
    const char *prompt = "Once upon a time";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc)
            socket_path = argv[++i];
        else
            prompt = argv[i];
    }

    char err[256];
    picolm_client *c;
    int r = picolm_connect_ex(socket_path, &c, err, sizeof(err));
    if (r != PICOLM_OK) {
        fprintf(stderr, "picolm-hello: %s (%s)\n", picolm_strerror(r), err);
        return r == PICOLM_E_UNREACHABLE ? 3 : 1;
    }

    struct picolm_model_info info = {.size = sizeof(info)};
    r = picolm_model_info(c, &info);
    if (r != PICOLM_OK)
        goto fail;
    printf("model: %s (%s, %u layers, vocabulary %u, context %u)\n", info.name, info.architecture,
           info.n_layer, info.n_vocab, info.n_ctx);

    /* 1. Callback form. */
    struct picolm_generate_params p;
    picolm_generate_params_init(&p);
    p.prompt = prompt;
    p.max_tokens = 32;
    p.sampling.temperature = 0; /* greedy */
    struct picolm_result res = {.size = sizeof(res)};
    printf("%s", prompt);
    r = picolm_generate(c, &p, on_chunk, NULL, &res);
    if (r != PICOLM_OK)
        goto fail;
    printf("\n[%u prompt + %u generated tokens, first token after %.2f ms]\n", res.prompt_tokens,
           res.generated_tokens, (double)res.ttft_ns / 1e6);

    /* 2. Iterator form: the same request, read chunk by chunk. */
    picolm_stream *s;
    r = picolm_stream_start(c, &p, &s);
    if (r != PICOLM_OK)
        goto fail;
    struct picolm_chunk chunk;
    size_t n_chunks = 0;
    while ((r = picolm_stream_next(s, &chunk)) == 1)
        n_chunks++;
    int end = picolm_stream_end(s, &res);
    if (r < 0 || end != PICOLM_OK) {
        r = r < 0 ? r : end;
        goto fail;
    }
    printf("[iterator: %zu chunks, %u tokens]\n", n_chunks, res.generated_tokens);

    picolm_close(c);
    return 0;

fail:
    fprintf(stderr, "picolm-hello: %s: %s\n", picolm_strerror(r), picolm_last_error(c));
    picolm_close(c);
    return 1;
}
