/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_policy into the folder given as argv[1]: valid policies
 * covering every section, key and match kind, and broken ones near each error path. */
#include <stdio.h>
#include <string.h>

static const char *const seeds[] = {
    /* the shape of packaging/policy.conf.example */
    ("[global]\nadmin_group = root\n[defaults]\nmax_sessions = 4\nmax_queued = 8\n"
     "max_prompt_tokens = 4096\nmax_new_tokens = 1024\nmax_context = 8192\n"
     "rate_tokens_per_s = unlimited\nweight = 100\npriority = interactive\n"
     "[rule root]\nmatch = uid:0\naccess = allow\nmax_sessions = unlimited\n"
     "[rule blocked]\nmatch = user:nobody\naccess = deny\n"
     "[rule batch-jobs]\nmatch = group:daemon\naccess = allow\npriority = batch\nweight = 25\n"
     "rate_tokens_per_s = 200\nrate_burst = 400\n"
     "[rule users]\nmatch = group:users | group:staff\naccess = allow\n"
     "[rule everyone-else]\nmatch = default\naccess = deny\n"),
    "[rule a]\nmatch = default\naccess = allow\n",
    "[rule a]\r\nmatch = uid:1|gid:2 # c\r\naccess = allow\r\nweight=1000",
    "[rule a]\nmatch = uid:1\naccess = allow\nmax_context = 10\nmax_prompt_tokens = 20\n",
    "[rule a]\nmatch = default\naccess = allow\n[rule b]\nmatch = uid:1\naccess = deny\n",
    "[rule a]\nmatch = user:no-such-user\naccess = allow\n",
    "[global]\nadmin_group = 65534\n[global]\n",
    "[rule a]\nmatch = uid:4294967295\naccess = allow\n",
    "[rule a]\nmatch = uid:1 | default\naccess = allow\nrate_burst = 0\n",
    "[defaults]\nmatch = uid:1\n",
    "[rule x y]\n",
    ("[rule a]\nmatch = group:root | user:root | uid:0 | gid:0\naccess = deny\n"
     "[rule b]\nmatch = default\naccess = allow\npriority = batch\n"),
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char path[4096];
        (void)snprintf(path, sizeof(path), "%s/seed-%02zu.conf", argv[1], i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(seeds[i], 1, strlen(seeds[i]), f) != strlen(seeds[i]) || fclose(f)) {
            perror(path);
            return 1;
        }
    }
    return 0;
}
