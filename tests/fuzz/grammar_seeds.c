/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_grammar into the folder given as argv[1]: schemas of the
 * supported subset (and some it refuses), each followed by a NUL and a text that fits it,
 * and JSON-mode texts (no NUL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed_file.h"

static void emit(const char *dir, const char *schema, const char *text) {
    /* the schema with its NUL, then the text */
    seed_write(dir, schema, schema ? strlen(schema) + 1 : 0, text, strlen(text));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *d = argv[1];
    emit(d, NULL, "{\"a\": [1, 2.5e3, true, null], \"b\": {\"c\": \"\\u00e9\\n\"}}");
    emit(d, NULL, "{}");
    emit(d,
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
         "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\"]}",
         "{\"name\": \"Ann\", \"age\": 42}");
    emit(d, "{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":1,\"maxItems\":3}",
         "[1, -2.5, 3e2]");
    emit(d, "{\"enum\":[\"red\",\"green\",1,null,{\"x\":[true]}]}", "\"green\"");
    emit(d, "{\"const\":{\"k\":[1,2,{\"z\":\"w\"}]}}", "{\"k\":[1,2,{\"z\":\"w\"}]}");
    emit(d, "{\"type\":[\"string\",\"null\"],\"minLength\":2}", "null");
    emit(d, "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
         "{\"x\": true, \"y\": false}");
    emit(d,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":"
         "{\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}",
         "{\"a\": {\"b\": [\"x\", \"y\"]}}");
    emit(d, "true", "[1, {\"a\": \"b\"}]");
    emit(d, "{\"type\":\"string\",\"pattern\":\"^a+$\"}", "\"aaa\"");         /* refused */
    emit(d, "{\"type\":\"integer\",\"minimum\":3}", "5");                     /* refused */
    emit(d, "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "\"\""); /* unsatisfiable */
    emit(d, "{\"type\":\"obj", "{");                                          /* malformed */
    return 0;
}
