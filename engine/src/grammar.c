/* SPDX-License-Identifier: MIT */
/* JSON grammar (engine_grammar.h): a compiled node graph (from JSON mode or a JSON-Schema
 * subset), a byte-level pushdown automaton over it whose state is a small stack of frames,
 * the shortest-completion distance of a state (for closing a value before the token budget
 * runs out), and token masks computed by walking a byte trie of the vocabulary with the
 * automaton. Called by the daemon's sampler step and the in-process CLI. */
#include "pl/engine_grammar.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_doc.h"
#include "pl/engine_tokenizer.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define NONE UINT32_MAX
#define UNBOUNDED UINT32_MAX
#define MAX_PROPS 64u
#define MAX_NODES 4096u
#define MAX_LIT_NODES (1u << 20)
#define MAX_SCHEMA_DEPTH 16u
#define MAX_BOUND 65535u /* minLength/maxLength/minItems/maxItems */
#define MAX_KEY_LEN 1024u
#define MAX_INT_DIGITS 18u
#define MAX_FRAC_DIGITS 18u
#define MAX_EXP_DIGITS 2u
#define ANY_MAX_DEPTH (PL_GRAMMAR_MAX_DEPTH - 1u)
#define CACHE_SLOTS 32u

/* ---- Compiled grammar ---- */

enum kind { K_UNION, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_LITS };

struct gnode {
    enum kind kind;
    uint32_t minlen; /* fewest bytes of a complete value */
    /* UNION: node to begin for each kind of first byte, or NONE */
    uint32_t u_obj, u_arr, u_str, u_num, u_lit;
    /* OBJECT */
    bool free_keys; /* any keys, values of node addl */
    uint32_t addl;
    uint32_t prop0, n_props; /* props[prop0 .. +n_props) */
    uint32_t cost0;          /* req_sum/req_cnt/opt_min[cost0 .. +n_props+1) */
    bool any;                /* part of the ANY graph: depth-limited */
    /* ARRAY: items; STRING / ARRAY: bounds */
    uint32_t items;
    uint32_t min, max;
    /* NUMBER */
    bool integer;
    /* LITS: root of the literal trie */
    uint32_t lit_root;
};

struct gprop {
    uint32_t key_off, key_len; /* escaped key bytes (without quotes) in keys[] */
    uint32_t value;
    bool required;
};

/* Literal trie (enum values, true/false/null): child/sibling lists. */
struct lnode {
    uint32_t child, sibling;
    uint32_t minrest; /* fewest bytes from here to the end of a literal */
    uint8_t byte;
    bool terminal;
};

struct pl_grammar {
    const struct pl_grammar_vocab *vocab;
    struct gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    struct gprop *props;
    uint32_t n_props, cap_props;
    char *keys;
    uint32_t keys_len, keys_cap;
    uint32_t *req_sum, *req_cnt, *opt_min; /* per object, n_props + 1 entries each */
    uint32_t n_cost, cap_cost;
    struct lnode *lits;
    uint32_t n_lits, cap_lits;
    uint32_t root;
    uint32_t any;    /* the any-value union, or NONE */
    uint32_t keystr; /* unbounded string for free keys, or NONE */
};

/* ---- Automaton state ---- */

enum phase {
    O_OPEN,
    O_KEY,
    O_KEYSTR,
    O_COLON,
    O_VALUE,
    O_VALUE_IN,
    O_AFTER,
    O_COMMA,
    A_OPEN,
    A_VALUE_IN,
    A_AFTER,
    A_COMMA,
    S_CHARS,
    S_ESC,
    S_HEX,
    S_UTF8,
    P_MINUS,
    P_ZERO,
    P_INT,
    P_DOT,
    P_FRAC,
    P_E,
    P_ESIGN,
    P_EXP,
    L_LIT,
};

/* Every field is set when a frame is pushed (states are hashed and compared bytewise). */
struct frame {
    uint32_t node;
    uint8_t phase;
    uint8_t ws;    /* whitespace bytes in a row */
    uint16_t x;    /* key byte / hex digit / UTF-8 bytes left / digits in this part */
    uint32_t a;    /* object: next property; array: items; string: code points;
                      literal: trie node */
    uint32_t b;    /* object: current property; string: surrogate flag or UTF-8 range */
    uint64_t mask; /* object: properties still matching the key being written */
};

struct gstate {
    uint32_t depth;
    uint32_t done; /* the top-level value is finished */
    struct frame f[PL_GRAMMAR_MAX_DEPTH];
};

/* ---- Vocabulary trie ---- */

struct vnode {
    uint32_t child0, n_child; /* children are contiguous */
    uint32_t tok0, n_tok;     /* tokens whose piece ends here: order[tok0 .. +n_tok) */
    uint8_t byte;
};

struct pl_grammar_vocab {
    uint32_t n_vocab;
    uint32_t n_words; /* 64-bit words of a token bitset */
    struct vnode *nodes;
    uint32_t n_nodes;
    int32_t *order; /* usable tokens sorted by piece */
    uint32_t n_usable;
    uint32_t *piece_off; /* [n_vocab] */
    uint16_t *piece_len; /* [n_vocab]; 0: never allowed */
    char *pieces;
    uint64_t *eog; /* bitset of EOG tokens */
    uint32_t max_piece;
};

struct cache_slot {
    bool valid;
    uint64_t hash;
    uint32_t max_dist; /* largest distance after any allowed token */
    uint32_t n_allowed;
    uint64_t *bits;
    struct gstate key;
};

struct pl_grammar_state {
    const struct pl_grammar *g;
    struct gstate cur;
    bool ended;
    struct gstate *scratch;          /* [max_piece + 2] */
    uint32_t *walk_node, *walk_next; /* [max_piece + 2] */
    uint64_t *bits;                  /* scratch bitset */
    struct cache_slot cache[CACHE_SLOTS];
    uint32_t cache_next;
};

/* ---- Saturating arithmetic for distances ---- */

static uint32_t sadd(uint32_t a, uint32_t b) {
    uint32_t r;
    return pl_add_overflow(a, b, &r) ? UINT32_MAX : r;
}

static uint32_t smul(uint32_t a, uint32_t b) {
    uint32_t r;
    return pl_mul_overflow(a, b, &r) ? UINT32_MAX : r;
}

/* ---- Automaton: helpers ---- */

static bool is_ws(uint8_t c) {
    return c == ' ' || c == '\n' || c == '\t';
}

static bool is_digit(uint8_t c) {
    return c >= '0' && c <= '9';
}

static bool is_hex(uint8_t c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const struct gnode *node_of(const struct pl_grammar *g, const struct frame *f) {
    return &g->nodes[f->node];
}

/* Whether property index i or a later one is required. */
static bool required_left(const struct pl_grammar *g, const struct gnode *n, uint32_t i) {
    return g->req_cnt[n->cost0 + i] > 0;
}

/* Properties that may come next when i is the next index in declaration order: i up to
 * the first required one (which cannot be skipped). */
static uint64_t candidates(const struct pl_grammar *g, const struct gnode *n, uint32_t i) {
    uint64_t m = 0;
    for (uint32_t j = i; j < n->n_props; j++) {
        m |= 1ull << j;
        if (g->props[n->prop0 + j].required)
            break;
    }
    return m;
}

/* Count one more (item or code point), saturating where the exact count stops mattering. */
static uint32_t count_up(uint32_t a, uint32_t min, uint32_t max) {
    if (max == UNBOUNDED && a >= min)
        return a;
    return a + 1;
}

enum { ST_REJECT, ST_OK, ST_REFEED };

static bool push(struct gstate *s, uint32_t node, uint8_t phase) {
    if (s->depth >= PL_GRAMMAR_MAX_DEPTH)
        return false;
    s->f[s->depth++] = (struct frame){.node = node, .phase = phase};
    return true;
}

/* The top frame is finished: drop it and move its parent past the value. */
static void pop(struct gstate *s) {
    s->depth--;
    if (s->depth == 0) {
        s->done = 1;
        return;
    }
    struct frame *p = &s->f[s->depth - 1];
    switch (p->phase) {
    case O_KEYSTR:
        p->phase = O_COLON;
        break;
    case O_VALUE_IN:
        p->phase = O_AFTER;
        break;
    case A_VALUE_IN:
        p->phase = A_AFTER;
        break;
    default:
        break;
    }
    p->ws = 0;
}

static bool lit_leaf(const struct pl_grammar *g, uint32_t l) {
    return g->lits[l].terminal && g->lits[l].child == NONE;
}

static uint32_t lit_child(const struct pl_grammar *g, uint32_t l, uint8_t c) {
    for (uint32_t k = g->lits[l].child; k != NONE; k = g->lits[k].sibling)
        if (g->lits[k].byte == c)
            return k;
    return NONE;
}

/* Start a value of node id with its first byte c. */
static int begin(const struct pl_grammar *g, struct gstate *s, uint32_t id, uint8_t c) {
    const struct gnode *n = &g->nodes[id];
    if (n->kind == K_UNION) {
        if (c == '{')
            id = n->u_obj;
        else if (c == '[')
            id = n->u_arr;
        else if (c == '"')
            id = n->u_str;
        else if (c == '-' || is_digit(c))
            id = n->u_num;
        else
            id = n->u_lit;
        if (id == NONE)
            return ST_REJECT;
        n = &g->nodes[id];
    }
    switch (n->kind) {
    case K_OBJECT:
    case K_ARRAY:
        if (c != (n->kind == K_OBJECT ? '{' : '['))
            return ST_REJECT;
        /* Any-value containers stop nesting where a child could not be pushed. */
        if (n->any && s->depth >= ANY_MAX_DEPTH)
            return ST_REJECT;
        return push(s, id, n->kind == K_OBJECT ? O_OPEN : A_OPEN) ? ST_OK : ST_REJECT;
    case K_STRING:
        if (c != '"')
            return ST_REJECT;
        return push(s, id, S_CHARS) ? ST_OK : ST_REJECT;
    case K_NUMBER:
        if (c == '-') {
            return push(s, id, P_MINUS) ? ST_OK : ST_REJECT;
        } else if (c == '0') {
            return push(s, id, P_ZERO) ? ST_OK : ST_REJECT;
        } else if (is_digit(c)) {
            if (!push(s, id, P_INT))
                return ST_REJECT;
            s->f[s->depth - 1].x = 1;
            return ST_OK;
        }
        return ST_REJECT;
    case K_LITS: {
        uint32_t l = lit_child(g, n->lit_root, c);
        if (l == NONE || !push(s, id, L_LIT))
            return ST_REJECT;
        s->f[s->depth - 1].a = l;
        if (lit_leaf(g, l))
            pop(s);
        return ST_OK;
    }
    case K_UNION:
        break;
    }
    return ST_REJECT;
}

/* Whitespace between tokens of a container: bounded run. */
static int ws_step(struct frame *f, uint8_t c, bool *handled) {
    if (!is_ws(c)) {
        *handled = false;
        return ST_OK;
    }
    *handled = true;
    if (f->ws >= PL_GRAMMAR_MAX_WS)
        return ST_REJECT;
    f->ws++;
    return ST_OK;
}

static int step_object(const struct pl_grammar *g, struct gstate *s, struct frame *f, uint8_t c) {
    const struct gnode *n = node_of(g, f);
    bool handled;
    switch (f->phase) {
    case O_OPEN:
    case O_COMMA:
        if (ws_step(f, c, &handled) == ST_REJECT)
            return ST_REJECT;
        if (handled)
            return ST_OK;
        f->ws = 0;
        if (c == '"') {
            if (n->free_keys) {
                f->phase = O_KEYSTR;
                return push(s, g->keystr, S_CHARS) ? ST_OK : ST_REJECT;
            }
            uint64_t m = candidates(g, n, f->a);
            if (m == 0)
                return ST_REJECT;
            f->phase = O_KEY;
            f->mask = m;
            f->x = 0;
            return ST_OK;
        }
        if (c == '}' && f->phase == O_OPEN && !required_left(g, n, f->a)) {
            pop(s);
            return ST_OK;
        }
        return ST_REJECT;
    case O_KEY: {
        uint64_t next = 0;
        for (uint64_t m = f->mask; m; m &= m - 1) {
            uint32_t j = (uint32_t)__builtin_ctzll(m);
            const struct gprop *p = &g->props[n->prop0 + j];
            if (c == '"' && p->key_len == f->x) {
                f->phase = O_COLON;
                f->b = j;
                f->a = j + 1;
                f->mask = 0;
                f->x = 0;
                return ST_OK;
            }
            if (p->key_len > f->x && (uint8_t)g->keys[p->key_off + f->x] == c)
                next |= 1ull << j;
        }
        if (next == 0)
            return ST_REJECT;
        f->mask = next;
        f->x++;
        return ST_OK;
    }
    case O_COLON:
        if (ws_step(f, c, &handled) == ST_REJECT)
            return ST_REJECT;
        if (handled)
            return ST_OK;
        if (c != ':')
            return ST_REJECT;
        f->ws = 0;
        f->phase = O_VALUE;
        return ST_OK;
    case O_VALUE: {
        if (ws_step(f, c, &handled) == ST_REJECT)
            return ST_REJECT;
        if (handled)
            return ST_OK;
        f->ws = 0;
        f->phase = O_VALUE_IN;
        uint32_t v = n->free_keys ? n->addl : g->props[n->prop0 + f->b].value;
        return begin(g, s, v, c);
    }
    case O_AFTER:
        if (ws_step(f, c, &handled) == ST_REJECT)
            return ST_REJECT;
        if (handled)
            return ST_OK;
        f->ws = 0;
        if (c == ',' && (n->free_keys || f->a < n->n_props)) {
            f->phase = O_COMMA;
            return ST_OK;
        }
        if (c == '}' && !required_left(g, n, f->a)) {
            pop(s);
            return ST_OK;
        }
        return ST_REJECT;
    default:
        return ST_REJECT;
    }
}

static int step_array(const struct pl_grammar *g, struct gstate *s, struct frame *f, uint8_t c) {
    const struct gnode *n = node_of(g, f);
    bool handled;
    if (ws_step(f, c, &handled) == ST_REJECT)
        return ST_REJECT;
    if (handled)
        return ST_OK;
    f->ws = 0;
    switch (f->phase) {
    case A_OPEN:
        if (c == ']' && n->min == 0) {
            pop(s);
            return ST_OK;
        }
        if (n->max == 0)
            return ST_REJECT;
        f->phase = A_VALUE_IN;
        f->a = count_up(f->a, n->min, n->max);
        return begin(g, s, n->items, c);
    case A_AFTER:
        if (c == ',' && f->a < n->max) {
            f->phase = A_COMMA;
            return ST_OK;
        }
        if (c == ']' && f->a >= n->min) {
            pop(s);
            return ST_OK;
        }
        return ST_REJECT;
    case A_COMMA:
        f->phase = A_VALUE_IN;
        f->a = count_up(f->a, n->min, n->max);
        return begin(g, s, n->items, c);
    default:
        return ST_REJECT;
    }
}

static int step_string(const struct pl_grammar *g, struct gstate *s, struct frame *f, uint8_t c) {
    const struct gnode *n = node_of(g, f);
    switch (f->phase) {
    case S_CHARS: {
        if (c == '"') {
            if (f->a < n->min)
                return ST_REJECT;
            pop(s);
            return ST_OK;
        }
        if (c < 0x20)
            return ST_REJECT;
        if (f->a >= n->max)
            return ST_REJECT;
        uint16_t need = 0;
        uint32_t lo = 0x80, hi = 0xBF;
        if (c == '\\') {
            f->phase = S_ESC;
        } else if (c >= 0x80) {
            if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                lo = c == 0xE0 ? 0xA0 : 0x80;
                hi = c == 0xED ? 0x9F : 0xBF;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                lo = c == 0xF0 ? 0x90 : 0x80;
                hi = c == 0xF4 ? 0x8F : 0xBF;
            } else {
                return ST_REJECT;
            }
            f->phase = S_UTF8;
            f->x = need;
            f->b = lo | hi << 8;
        }
        f->a = count_up(f->a, n->min, n->max);
        return ST_OK;
    }
    case S_ESC:
        if (c == 'u') {
            f->phase = S_HEX;
            f->x = 0;
            f->b = 0;
            return ST_OK;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' &&
            c != 't')
            return ST_REJECT;
        f->phase = S_CHARS;
        return ST_OK;
    case S_HEX:
        if (!is_hex(c))
            return ST_REJECT;
        /* No surrogates: \uD800-\uDFFF would need a pair and count as one code point. */
        if (f->x == 0 && (c == 'd' || c == 'D'))
            f->b = 1;
        else if (f->x == 1 && f->b == 1 && !(c >= '0' && c <= '7'))
            return ST_REJECT;
        if (++f->x == 4) {
            f->phase = S_CHARS;
            f->x = 0;
            f->b = 0;
        }
        return ST_OK;
    case S_UTF8:
        if (c < (f->b & 0xFF) || c > (f->b >> 8))
            return ST_REJECT;
        f->b = 0x80 | 0xBF << 8;
        if (--f->x == 0) {
            f->phase = S_CHARS;
            f->b = 0;
        }
        return ST_OK;
    default:
        return ST_REJECT;
    }
}

static int step_number(const struct pl_grammar *g, struct gstate *s, struct frame *f, uint8_t c) {
    bool integer = node_of(g, f)->integer;
    switch (f->phase) {
    case P_MINUS:
        if (c == '0') {
            f->phase = P_ZERO;
            return ST_OK;
        }
        if (is_digit(c)) {
            f->phase = P_INT;
            f->x = 1;
            return ST_OK;
        }
        return ST_REJECT;
    case P_ZERO:
    case P_INT:
        if (is_digit(c)) {
            if (f->phase == P_ZERO || f->x >= MAX_INT_DIGITS)
                return ST_REJECT;
            f->x++;
            return ST_OK;
        }
        if (!integer && c == '.') {
            f->phase = P_DOT;
            f->x = 0;
            return ST_OK;
        }
        if (!integer && (c == 'e' || c == 'E')) {
            f->phase = P_E;
            f->x = 0;
            return ST_OK;
        }
        pop(s);
        return ST_REFEED;
    case P_DOT:
        if (!is_digit(c))
            return ST_REJECT;
        f->phase = P_FRAC;
        f->x = 1;
        return ST_OK;
    case P_FRAC:
        if (is_digit(c)) {
            if (f->x >= MAX_FRAC_DIGITS)
                return ST_REJECT;
            f->x++;
            return ST_OK;
        }
        if (c == 'e' || c == 'E') {
            f->phase = P_E;
            f->x = 0;
            return ST_OK;
        }
        pop(s);
        return ST_REFEED;
    case P_E:
    case P_ESIGN:
        if (f->phase == P_E && (c == '+' || c == '-')) {
            f->phase = P_ESIGN;
            return ST_OK;
        }
        if (!is_digit(c))
            return ST_REJECT;
        f->phase = P_EXP;
        f->x = 1;
        return ST_OK;
    case P_EXP:
        if (is_digit(c)) {
            if (f->x >= MAX_EXP_DIGITS)
                return ST_REJECT;
            f->x++;
            return ST_OK;
        }
        pop(s);
        return ST_REFEED;
    default:
        return ST_REJECT;
    }
}

static int step_lit(const struct pl_grammar *g, struct gstate *s, struct frame *f, uint8_t c) {
    uint32_t l = lit_child(g, f->a, c);
    if (l == NONE) {
        if (!g->lits[f->a].terminal)
            return ST_REJECT;
        pop(s);
        return ST_REFEED;
    }
    f->a = l;
    if (lit_leaf(g, l))
        pop(s);
    return ST_OK;
}

/* Feed one byte; false when rejected (s is then garbage: callers work on copies). */
static bool feed(const struct pl_grammar *g, struct gstate *s, uint8_t c) {
    for (;;) {
        if (s->depth == 0) {
            if (s->done)
                return false;
            return begin(g, s, g->root, c) == ST_OK;
        }
        struct frame *f = &s->f[s->depth - 1];
        int r;
        switch (g->nodes[f->node].kind) {
        case K_OBJECT:
            r = step_object(g, s, f, c);
            break;
        case K_ARRAY:
            r = step_array(g, s, f, c);
            break;
        case K_STRING:
            r = step_string(g, s, f, c);
            break;
        case K_NUMBER:
            r = step_number(g, s, f, c);
            break;
        case K_LITS:
            r = step_lit(g, s, f, c);
            break;
        case K_UNION:
        default:
            r = ST_REJECT;
            break;
        }
        if (r != ST_REFEED)
            return r == ST_OK;
    }
}

static bool can_end(const struct pl_grammar *g, const struct frame *f) {
    switch (f->phase) {
    case P_ZERO:
    case P_INT:
    case P_FRAC:
    case P_EXP:
        return true;
    case L_LIT:
        return g->lits[f->a].terminal;
    default:
        return false;
    }
}

static bool complete(const struct pl_grammar *g, const struct gstate *s) {
    if (s->depth == 0)
        return s->done != 0;
    return s->depth == 1 && can_end(g, &s->f[0]);
}

/* ---- Shortest completion ---- */

static uint32_t minlen(const struct pl_grammar *g, uint32_t id) {
    return g->nodes[id].minlen;
}

/* Bytes still needed by the required properties from index i on, with their commas
 * (plus one more comma when something precedes them). */
static uint32_t req_rest(const struct pl_grammar *g, const struct gnode *n, uint32_t i,
                         bool after_something) {
    uint32_t cnt = g->req_cnt[n->cost0 + i];
    if (cnt == 0)
        return 0;
    return sadd(g->req_sum[n->cost0 + i], after_something ? cnt : cnt - 1);
}

static uint32_t array_rest(const struct gnode *n, uint32_t a, uint32_t ml) {
    uint32_t missing = a < n->min ? n->min - a : 0;
    return sadd(smul(missing, sadd(ml, 1)), 1);
}

static uint32_t string_rest(const struct gnode *n, uint32_t a) {
    return sadd(a < n->min ? n->min - a : 0, 1);
}

/* Fewest bytes that finish frame f, not counting a child frame above it. */
static uint32_t frame_rest(const struct pl_grammar *g, const struct frame *f) {
    const struct gnode *n = node_of(g, f);
    switch (f->phase) {
    case O_OPEN:
        return sadd(req_rest(g, n, 0, false), 1);
    case O_KEY: {
        uint32_t best = UINT32_MAX;
        for (uint64_t m = f->mask; m; m &= m - 1) {
            uint32_t j = (uint32_t)__builtin_ctzll(m);
            const struct gprop *p = &g->props[n->prop0 + j];
            uint32_t d = sadd(p->key_len - f->x, 2);
            d = sadd(d, minlen(g, p->value));
            d = sadd(d, req_rest(g, n, j + 1, true));
            best = PL_MIN(best, d);
        }
        return sadd(best, 1);
    }
    case O_KEYSTR:
        return sadd(minlen(g, n->addl), 2);
    case O_COLON:
    case O_VALUE: {
        uint32_t v = n->free_keys ? n->addl : g->props[n->prop0 + f->b].value;
        uint32_t d = sadd(minlen(g, v), f->phase == O_COLON ? 1 : 0);
        return sadd(sadd(d, req_rest(g, n, f->a, true)), 1);
    }
    case O_VALUE_IN:
    case O_AFTER:
        return sadd(req_rest(g, n, f->a, true), 1);
    case O_COMMA:
        if (g->req_cnt[n->cost0 + f->a] > 0)
            return sadd(req_rest(g, n, f->a, false), 1);
        if (n->free_keys)
            return sadd(minlen(g, n->addl), 4);
        return sadd(g->opt_min[n->cost0 + f->a], 1);
    case A_OPEN: {
        uint32_t ml = minlen(g, n->items);
        if (n->min == 0)
            return 1;
        return sadd(sadd(smul(n->min, ml), n->min - 1), 1);
    }
    case A_VALUE_IN:
    case A_AFTER:
        return array_rest(n, f->a, minlen(g, n->items));
    case A_COMMA:
        return sadd(minlen(g, n->items), array_rest(n, f->a + 1, minlen(g, n->items)));
    case S_CHARS:
        return string_rest(n, f->a);
    case S_ESC:
        return sadd(string_rest(n, f->a), 1);
    case S_HEX:
        return sadd(string_rest(n, f->a), 4u - f->x);
    case S_UTF8:
        return sadd(string_rest(n, f->a), f->x);
    case P_MINUS:
    case P_DOT:
    case P_E:
    case P_ESIGN:
        return 1;
    case P_ZERO:
    case P_INT:
    case P_FRAC:
    case P_EXP:
        return 0;
    case L_LIT:
        return g->lits[f->a].minrest;
    default:
        return UINT32_MAX;
    }
}

static uint32_t distance(const struct pl_grammar *g, const struct gstate *s) {
    if (s->depth == 0)
        return s->done ? 0 : minlen(g, g->root);
    uint32_t d = 0;
    for (uint32_t i = 0; i < s->depth; i++)
        d = sadd(d, frame_rest(g, &s->f[i]));
    return d;
}

static void state_copy(struct gstate *dst, const struct gstate *src) {
    dst->depth = src->depth;
    dst->done = src->done;
    memcpy(dst->f, src->f, src->depth * sizeof(src->f[0]));
}

static uint64_t state_hash(const struct gstate *s) {
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)s;
    size_t n = offsetof(struct gstate, f) + s->depth * sizeof(s->f[0]);
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool state_equal(const struct gstate *a, const struct gstate *b) {
    return a->depth == b->depth && a->done == b->done &&
           memcmp(a->f, b->f, a->depth * sizeof(a->f[0])) == 0;
}

/* ---- Compiler ---- */

struct compiler {
    struct pl_grammar *g;
    const struct pl_json_doc *doc;
    char *err;
    size_t err_len;
    char *buf; /* serialisation scratch for literals */
    size_t buf_len, buf_cap;
};

__attribute__((format(printf, 3, 4))) static int cfail(struct compiler *c, int r, const char *fmt,
                                                       ...) {
    if (c->err && c->err_len > 0 && c->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    return r;
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elsize) {
    if (need <= *cap)
        return 0;
    uint32_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > UINT32_MAX / 2)
            return -ENOMEM;
        nc *= 2;
    }
    void *np = realloc(*p, (size_t)nc * elsize);
    if (!np)
        return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static int new_gnode(struct compiler *c, enum kind k, uint32_t *ret) {
    struct pl_grammar *g = c->g;
    if (g->n_nodes >= MAX_NODES)
        return cfail(c, -PL_ERR_UNSUPPORTED, "schema too large (over %u nodes)", MAX_NODES);
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(*g->nodes)) < 0)
        return -ENOMEM;
    g->nodes[g->n_nodes] = (struct gnode){.kind = k,
                                          .u_obj = NONE,
                                          .u_arr = NONE,
                                          .u_str = NONE,
                                          .u_num = NONE,
                                          .u_lit = NONE,
                                          .addl = NONE,
                                          .items = NONE,
                                          .max = UNBOUNDED,
                                          .lit_root = NONE};
    *ret = g->n_nodes++;
    return 0;
}

static int new_lnode(struct compiler *c, uint8_t byte, uint32_t *ret) {
    struct pl_grammar *g = c->g;
    if (g->n_lits >= MAX_LIT_NODES)
        return cfail(c, -PL_ERR_UNSUPPORTED, "enum values too large");
    if (grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof(*g->lits)) < 0)
        return -ENOMEM;
    g->lits[g->n_lits] =
        (struct lnode){.child = NONE, .sibling = NONE, .minrest = UINT32_MAX, .byte = byte};
    *ret = g->n_lits++;
    return 0;
}

static int lit_insert(struct compiler *c, uint32_t root, const char *s, size_t n) {
    uint32_t cur = root;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = lit_child(c->g, cur, (uint8_t)s[i]);
        if (k == NONE) {
            int r = new_lnode(c, (uint8_t)s[i], &k);
            if (r < 0)
                return r;
            c->g->lits[k].sibling = c->g->lits[cur].child;
            c->g->lits[cur].child = k;
        }
        cur = k;
    }
    c->g->lits[cur].terminal = true;
    return 0;
}

/* minrest of every node below l (children have larger indices than their parent, so one
 * backward pass over the new range settles them). */
static void lit_finish(struct pl_grammar *g, uint32_t first) {
    for (uint32_t l = g->n_lits; l-- > first;) {
        uint32_t best = g->lits[l].terminal ? 0 : UINT32_MAX;
        for (uint32_t k = g->lits[l].child; k != NONE; k = g->lits[k].sibling)
            best = PL_MIN(best, sadd(g->lits[k].minrest, 1));
        g->lits[l].minrest = best;
    }
}

static int lits_node(struct compiler *c, const char *const *vals, const size_t *lens, size_t n,
                     uint32_t *ret) {
    uint32_t id, root = 0;
    int r = new_gnode(c, K_LITS, &id);
    if (r < 0)
        return r;
    uint32_t first = c->g->n_lits;
    if ((r = new_lnode(c, 0, &root)) < 0)
        return r;
    for (size_t i = 0; i < n; i++)
        if ((r = lit_insert(c, root, vals[i], lens[i])) < 0)
            return r;
    lit_finish(c->g, first);
    c->g->nodes[id].lit_root = root;
    c->g->nodes[id].minlen = c->g->lits[root].minrest;
    *ret = id;
    return 0;
}

/* ---- Literal serialisation (canonical compact JSON) ---- */

static int bput(struct compiler *c, const char *s, size_t n) {
    if (c->buf_len + n > c->buf_cap) {
        size_t nc = c->buf_cap ? c->buf_cap : 256;
        while (nc < c->buf_len + n) {
            if (nc > PL_GRAMMAR_MAX_SCHEMA * 8)
                return cfail(c, -PL_ERR_UNSUPPORTED, "enum value too long");
            nc *= 2;
        }
        char *nb = realloc(c->buf, nc);
        if (!nb)
            return -ENOMEM;
        c->buf = nb;
        c->buf_cap = nc;
    }
    memcpy(c->buf + c->buf_len, s, n);
    c->buf_len += n;
    return 0;
}

/* Escape s as the inside of a JSON string: quote, backslash and control bytes escaped,
 * everything else (valid UTF-8, checked by the parser) as is. */
static int put_escaped(struct compiler *c, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        int r;
        if (ch == '"' || ch == '\\') {
            e[0] = '\\';
            e[1] = (char)ch;
            r = bput(c, e, 2);
        } else if (ch < 0x20) {
            (void)snprintf(e, sizeof(e), "\\u%04x", ch);
            r = bput(c, e, 6);
        } else {
            r = bput(c, (const char *)&s[i], 1);
        }
        if (r < 0)
            return r;
    }
    return 0;
}

static int serialize(struct compiler *c, const struct pl_json_node *j) {
    const struct pl_json_node *nodes = c->doc->nodes;
    int r = 0;
    switch (j->kind) {
    case PL_JSON_K_NULL:
        return bput(c, "null", 4);
    case PL_JSON_K_BOOL:
        return j->boolean ? bput(c, "true", 4) : bput(c, "false", 5);
    case PL_JSON_K_NUMBER:
        return bput(c, j->str, j->str_len);
    case PL_JSON_K_STRING:
        if ((r = bput(c, "\"", 1)) < 0 || (r = put_escaped(c, j->str, j->str_len)) < 0)
            return r;
        return bput(c, "\"", 1);
    case PL_JSON_K_ARRAY:
    case PL_JSON_K_OBJECT: {
        bool obj = j->kind == PL_JSON_K_OBJECT;
        if ((r = bput(c, obj ? "{" : "[", 1)) < 0)
            return r;
        for (uint32_t k = j->first; k != PL_JSON_NONE; k = nodes[k].next) {
            if (k != j->first && (r = bput(c, ",", 1)) < 0)
                return r;
            if (obj && ((r = bput(c, "\"", 1)) < 0 ||
                        (r = put_escaped(c, nodes[k].key, nodes[k].key_len)) < 0 ||
                        (r = bput(c, "\":", 2)) < 0))
                return r;
            if ((r = serialize(c, &nodes[k])) < 0)
                return r;
        }
        return bput(c, obj ? "}" : "]", 1);
    }
    }
    return -EINVAL;
}

/* ---- Schema keywords ---- */

enum {
    T_OBJ = 1 << 0,
    T_ARR = 1 << 1,
    T_STR = 1 << 2,
    T_INT = 1 << 3,
    T_NUM = 1 << 4,
    T_BOOL = 1 << 5,
    T_NULL = 1 << 6,
    T_ALL = 0x7F,
};

static const char *const type_names[] = {"object", "array",   "string", "integer",
                                         "number", "boolean", "null"};

static const char *const annotations[] = {"title",    "description", "default",   "examples",
                                          "format",   "$schema",     "$id",       "$comment",
                                          "readOnly", "writeOnly",   "deprecated"};
static const char *const keywords[] = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "minLength",
    "maxLength", "enum",       "const"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}

static bool value_has_type(const struct pl_json_node *j, unsigned types) {
    switch (j->kind) {
    case PL_JSON_K_OBJECT:
        return types & T_OBJ;
    case PL_JSON_K_ARRAY:
        return types & T_ARR;
    case PL_JSON_K_STRING:
        return types & T_STR;
    case PL_JSON_K_NUMBER:
        return (types & T_NUM) ||
               ((types & T_INT) && isfinite(j->number) && floor(j->number) == j->number);
    case PL_JSON_K_BOOL:
        return types & T_BOOL;
    case PL_JSON_K_NULL:
        return types & T_NULL;
    }
    return false;
}

/* A bound keyword: an integral number in [0, MAX_BOUND]; *ret unchanged when absent. */
static int get_bound(struct compiler *c, const struct pl_json_node *o, const char *k,
                     uint32_t *ret) {
    const struct pl_json_node *j = pl_json_doc_get(c->doc, o, k);
    if (!j)
        return 0;
    if (j->kind != PL_JSON_K_NUMBER || !(j->number >= 0) || floor(j->number) != j->number)
        return cfail(c, -EINVAL, "\"%s\" must be a non-negative integer", k);
    if (j->number > MAX_BOUND)
        return cfail(c, -PL_ERR_UNSUPPORTED, "\"%s\" above %u", k, MAX_BOUND);
    *ret = (uint32_t)j->number;
    return 0;
}

static int compile_schema(struct compiler *c, const struct pl_json_node *j, uint32_t depth,
                          uint32_t *ret);

/* Exactly one of en (an "enum" array) and cn (a "const" value) is given. */
static int compile_enum(struct compiler *c, const struct pl_json_node *en,
                        const struct pl_json_node *cn, unsigned types, uint32_t *ret) {
    uint32_t n = en ? en->n : 1;
    /* Serialise every kept value into one buffer, then build the trie from slices. */
    const struct pl_json_node *nodes = c->doc->nodes;
    size_t *offs = calloc((size_t)n + 1, sizeof(*offs));
    const char **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
    size_t *lens = calloc((size_t)n + 1, sizeof(*lens));
    int r = 0;
    size_t kept = 0;
    if (!offs || !ptrs || !lens) {
        r = -ENOMEM;
        goto out;
    }
    c->buf_len = 0;
    for (uint32_t k = en ? en->first : PL_JSON_NONE; k != PL_JSON_NONE; k = nodes[k].next) {
        if (!value_has_type(&nodes[k], types))
            continue;
        offs[kept] = c->buf_len;
        if ((r = serialize(c, &nodes[k])) < 0)
            goto out;
        lens[kept] = c->buf_len - offs[kept];
        kept++;
    }
    if (cn) {
        if (value_has_type(cn, types)) {
            if ((r = serialize(c, cn)) < 0)
                goto out;
            lens[0] = c->buf_len;
            kept = 1;
        }
    }
    if (kept == 0) {
        r = cfail(c, -EINVAL, "\"enum\"/\"const\" allows no value of the given type");
        goto out;
    }
    for (size_t i = 0; i < kept; i++)
        ptrs[i] = c->buf + offs[i];
    r = lits_node(c, ptrs, lens, kept, ret);
out:
    free(offs);
    free(ptrs);
    free(lens);
    return r;
}

static int cost_alloc(struct compiler *c, uint32_t n, uint32_t *ret) {
    struct pl_grammar *g = c->g;
    uint32_t need = g->n_cost + n, cap = g->cap_cost;
    if (grow((void **)&g->req_sum, &cap, need, sizeof(uint32_t)) < 0)
        return -ENOMEM;
    if (cap != g->cap_cost) {
        uint32_t *rc = realloc(g->req_cnt, (size_t)cap * sizeof(uint32_t));
        if (!rc)
            return -ENOMEM;
        g->req_cnt = rc;
        uint32_t *om = realloc(g->opt_min, (size_t)cap * sizeof(uint32_t));
        if (!om)
            return -ENOMEM;
        g->opt_min = om;
        g->cap_cost = cap;
    }
    *ret = g->n_cost;
    g->n_cost = need;
    return 0;
}

/* The unbounded string node used for the keys of free-form objects. */
static int need_keystr(struct compiler *c) {
    if (c->g->keystr != NONE)
        return 0;
    uint32_t ks;
    int r = new_gnode(c, K_STRING, &ks);
    if (r < 0)
        return r;
    c->g->nodes[ks].minlen = 2;
    c->g->keystr = ks;
    return 0;
}

/* The any-value graph, built once per grammar. */
static int build_any(struct compiler *c, uint32_t *ret) {
    struct pl_grammar *g = c->g;
    if (g->any != NONE) {
        *ret = g->any;
        return 0;
    }
    uint32_t u = 0, o = 0, a = 0, s = 0, num = 0, lit = 0; /* set below (gcc cannot tell) */
    static const char *const words[] = {"true", "false", "null"};
    static const size_t wl[] = {4, 5, 4};
    int r;
    if ((r = new_gnode(c, K_UNION, &u)) < 0 || (r = new_gnode(c, K_OBJECT, &o)) < 0 ||
        (r = new_gnode(c, K_ARRAY, &a)) < 0 || (r = new_gnode(c, K_STRING, &s)) < 0 ||
        (r = new_gnode(c, K_NUMBER, &num)) < 0 || (r = lits_node(c, words, wl, 3, &lit)) < 0)
        return r;
    uint32_t cost0;
    if ((r = cost_alloc(c, 1, &cost0)) < 0)
        return r;
    if ((r = need_keystr(c)) < 0)
        return r;
    g->req_sum[cost0] = g->req_cnt[cost0] = 0;
    g->opt_min[cost0] = UINT32_MAX;

    struct gnode *n = g->nodes;
    n[u].u_obj = o;
    n[u].u_arr = a;
    n[u].u_str = s;
    n[u].u_num = num;
    n[u].u_lit = lit;
    n[u].minlen = 1;
    n[o].free_keys = true;
    n[o].addl = u;
    n[o].any = true;
    n[o].cost0 = cost0;
    n[o].minlen = 2;
    n[a].items = u;
    n[a].any = true;
    n[a].minlen = 2;
    n[s].minlen = 2;
    n[num].minlen = 1;
    g->any = u;
    *ret = u;
    return 0;
}

static int compile_object(struct compiler *c, const struct pl_json_node *o, uint32_t depth,
                          uint32_t *ret) {
    struct pl_grammar *g = c->g;
    const struct pl_json_node *nodes = c->doc->nodes;
    const struct pl_json_node *props = pl_json_doc_get(c->doc, o, "properties");
    const struct pl_json_node *req = pl_json_doc_get(c->doc, o, "required");
    const struct pl_json_node *addl = pl_json_doc_get(c->doc, o, "additionalProperties");
    int r;
    if (props && props->kind != PL_JSON_K_OBJECT)
        return cfail(c, -EINVAL, "\"properties\" must be an object");
    if (req && req->kind != PL_JSON_K_ARRAY)
        return cfail(c, -EINVAL, "\"required\" must be an array");
    if (addl && addl->kind != PL_JSON_K_BOOL && addl->kind != PL_JSON_K_OBJECT)
        return cfail(c, -EINVAL, "\"additionalProperties\" must be a boolean or a schema");
    if (req) {
        for (uint32_t k = req->first; k != PL_JSON_NONE; k = nodes[k].next) {
            if (nodes[k].kind != PL_JSON_K_STRING)
                return cfail(c, -EINVAL, "\"required\" must hold strings");
            if (!pl_json_doc_get(c->doc, props, nodes[k].str))
                return cfail(c, -PL_ERR_UNSUPPORTED,
                             "required property \"%.64s\" is not in \"properties\"", nodes[k].str);
        }
    }
    uint32_t n_props = props ? props->n : 0;
    if (n_props > MAX_PROPS)
        return cfail(c, -PL_ERR_UNSUPPORTED, "more than %u properties", MAX_PROPS);

    uint32_t id;
    if ((r = new_gnode(c, K_OBJECT, &id)) < 0)
        return r;
    uint32_t prop0 = g->n_props;
    if (grow((void **)&g->props, &g->cap_props, g->n_props + n_props, sizeof(*g->props)) < 0)
        return -ENOMEM;
    g->n_props += n_props;
    uint32_t i = 0;
    for (uint32_t k = props ? props->first : PL_JSON_NONE; k != PL_JSON_NONE;
         k = nodes[k].next, i++) {
        const struct pl_json_node *p = &nodes[k];
        for (uint32_t q = props->first; q != k; q = nodes[q].next)
            if (nodes[q].key_len == p->key_len && memcmp(nodes[q].key, p->key, p->key_len) == 0)
                return cfail(c, -EINVAL, "duplicate property \"%.64s\"", p->key);
        bool required = false;
        for (uint32_t q = req ? req->first : PL_JSON_NONE; q != PL_JSON_NONE; q = nodes[q].next)
            if (nodes[q].str_len == p->key_len && memcmp(nodes[q].str, p->key, p->key_len) == 0)
                required = true;
        c->buf_len = 0;
        if ((r = put_escaped(c, p->key, p->key_len)) < 0)
            return r;
        if (c->buf_len > MAX_KEY_LEN)
            return cfail(c, -PL_ERR_UNSUPPORTED, "property name above %u bytes", MAX_KEY_LEN);
        uint32_t key_off = g->keys_len;
        if (grow((void **)&g->keys, &g->keys_cap, g->keys_len + (uint32_t)c->buf_len + 1, 1) < 0)
            return -ENOMEM;
        memcpy(g->keys + key_off, c->buf, c->buf_len);
        g->keys_len += (uint32_t)c->buf_len;
        uint32_t key_len = (uint32_t)c->buf_len;
        uint32_t v;
        if ((r = compile_schema(c, p, depth + 1, &v)) < 0)
            return r;
        g->props[prop0 + i] = (struct gprop){
            .key_off = key_off, .key_len = key_len, .value = v, .required = required};
    }

    uint32_t cost0;
    if ((r = cost_alloc(c, n_props + 1, &cost0)) < 0)
        return r;
    g->req_sum[cost0 + n_props] = 0;
    g->req_cnt[cost0 + n_props] = 0;
    g->opt_min[cost0 + n_props] = UINT32_MAX;
    for (uint32_t j = n_props; j-- > 0;) {
        const struct gprop *p = &g->props[prop0 + j];
        uint32_t cost = sadd(sadd(p->key_len, 3), g->nodes[p->value].minlen);
        g->req_sum[cost0 + j] = sadd(g->req_sum[cost0 + j + 1], p->required ? cost : 0);
        g->req_cnt[cost0 + j] = g->req_cnt[cost0 + j + 1] + (p->required ? 1 : 0);
        g->opt_min[cost0 + j] = PL_MIN(g->opt_min[cost0 + j + 1], cost);
    }

    bool free_keys = n_props == 0 && !(addl && addl->kind == PL_JSON_K_BOOL && !addl->boolean);
    uint32_t addl_node = NONE;
    if (free_keys) {
        if (addl && addl->kind == PL_JSON_K_OBJECT)
            r = compile_schema(c, addl, depth + 1, &addl_node);
        else
            r = build_any(c, &addl_node);
        if (r < 0)
            return r;
        if ((r = need_keystr(c)) < 0)
            return r;
    }
    struct gnode *n = &g->nodes[id];
    n->prop0 = prop0;
    n->n_props = n_props;
    n->cost0 = cost0;
    n->free_keys = free_keys;
    n->addl = addl_node;
    n->minlen = sadd(sadd(g->req_sum[cost0], g->req_cnt[cost0] ? g->req_cnt[cost0] - 1 : 0), 2);
    *ret = id;
    return 0;
}

static int compile_typed(struct compiler *c, const struct pl_json_node *o, unsigned t,
                         uint32_t depth, uint32_t *ret) {
    struct pl_grammar *g = c->g;
    uint32_t id;
    int r;
    switch (t) {
    case T_OBJ:
        return compile_object(c, o, depth, ret);
    case T_ARR: {
        const struct pl_json_node *items = pl_json_doc_get(c->doc, o, "items");
        uint32_t min = 0, max = UNBOUNDED, it;
        if ((r = get_bound(c, o, "minItems", &min)) < 0 ||
            (r = get_bound(c, o, "maxItems", &max)) < 0)
            return r;
        if (min > max)
            return cfail(c, -EINVAL, "minItems above maxItems");
        if (items && items->kind == PL_JSON_K_ARRAY)
            return cfail(c, -PL_ERR_UNSUPPORTED, "tuple \"items\"");
        r = items ? compile_schema(c, items, depth + 1, &it) : build_any(c, &it);
        if (r < 0 || (r = new_gnode(c, K_ARRAY, &id)) < 0)
            return r;
        struct gnode *n = &g->nodes[id];
        n->items = it;
        n->min = min;
        n->max = max;
        n->minlen = sadd(min ? sadd(smul(min, g->nodes[it].minlen), min - 1) : 0, 2);
        *ret = id;
        return 0;
    }
    case T_STR: {
        uint32_t min = 0, max = UNBOUNDED;
        if ((r = get_bound(c, o, "minLength", &min)) < 0 ||
            (r = get_bound(c, o, "maxLength", &max)) < 0)
            return r;
        if (min > max)
            return cfail(c, -EINVAL, "minLength above maxLength");
        if ((r = new_gnode(c, K_STRING, &id)) < 0)
            return r;
        g->nodes[id].min = min;
        g->nodes[id].max = max;
        g->nodes[id].minlen = sadd(min, 2);
        *ret = id;
        return 0;
    }
    case T_INT:
    case T_NUM:
    case T_INT | T_NUM:
        if ((r = new_gnode(c, K_NUMBER, &id)) < 0)
            return r;
        g->nodes[id].integer = t == T_INT;
        g->nodes[id].minlen = 1;
        *ret = id;
        return 0;
    default: {
        /* boolean and/or null */
        const char *w[3];
        size_t l[3], n = 0;
        if (t & T_BOOL) {
            w[n] = "true", l[n++] = 4;
            w[n] = "false", l[n++] = 5;
        }
        if (t & T_NULL)
            w[n] = "null", l[n++] = 4;
        return lits_node(c, w, l, n, ret);
    }
    }
}

static int compile_schema(struct compiler *c, const struct pl_json_node *j, uint32_t depth,
                          uint32_t *ret) {
    const struct pl_json_node *nodes = c->doc->nodes;
    if (depth > MAX_SCHEMA_DEPTH)
        return cfail(c, -PL_ERR_UNSUPPORTED, "schema nested deeper than %u", MAX_SCHEMA_DEPTH);
    if (j->kind == PL_JSON_K_BOOL) {
        if (!j->boolean)
            return cfail(c, -PL_ERR_UNSUPPORTED, "the false schema allows nothing");
        return build_any(c, ret);
    }
    if (j->kind != PL_JSON_K_OBJECT)
        return cfail(c, -EINVAL, "a schema must be an object or a boolean");
    for (uint32_t k = j->first; k != PL_JSON_NONE; k = nodes[k].next) {
        const char *key = nodes[k].key;
        if (strlen(key) != nodes[k].key_len)
            return cfail(c, -PL_ERR_UNSUPPORTED, "keyword with a NUL byte");
        if (!in_list(key, keywords, PL_ARRAY_SIZE(keywords)) &&
            !in_list(key, annotations, PL_ARRAY_SIZE(annotations)))
            return cfail(c, -PL_ERR_UNSUPPORTED, "unsupported keyword \"%.64s\"", key);
    }

    unsigned types = 0;
    const struct pl_json_node *type = pl_json_doc_get(c->doc, j, "type");
    if (type) {
        uint32_t first = type->kind == PL_JSON_K_ARRAY ? type->first : (uint32_t)(type - nodes);
        for (uint32_t k = first; k != PL_JSON_NONE;
             k = type->kind == PL_JSON_K_ARRAY ? nodes[k].next : PL_JSON_NONE) {
            if (nodes[k].kind != PL_JSON_K_STRING)
                return cfail(c, -EINVAL, "\"type\" must be a name or an array of names");
            unsigned bit = 0;
            for (size_t t = 0; t < PL_ARRAY_SIZE(type_names); t++)
                if (strcmp(nodes[k].str, type_names[t]) == 0)
                    bit = 1u << t;
            if (!bit)
                return cfail(c, -EINVAL, "unknown type \"%.32s\"", nodes[k].str);
            types |= bit;
        }
        if (types == 0)
            return cfail(c, -EINVAL, "empty \"type\"");
    }

    const struct pl_json_node *en = pl_json_doc_get(c->doc, j, "enum");
    const struct pl_json_node *cn = pl_json_doc_get(c->doc, j, "const");
    if (en && cn)
        return cfail(c, -PL_ERR_UNSUPPORTED, "both \"enum\" and \"const\"");
    if (en) {
        if (en->kind != PL_JSON_K_ARRAY || en->n == 0)
            return cfail(c, -EINVAL, "\"enum\" must be a non-empty array");
        return compile_enum(c, en, NULL, types ? types : T_ALL, ret);
    }
    if (cn)
        return compile_enum(c, NULL, cn, types ? types : T_ALL, ret);

    if (!types) {
        if (pl_json_doc_get(c->doc, j, "properties") || pl_json_doc_get(c->doc, j, "required") ||
            pl_json_doc_get(c->doc, j, "additionalProperties"))
            types |= T_OBJ;
        if (pl_json_doc_get(c->doc, j, "items") || pl_json_doc_get(c->doc, j, "minItems") ||
            pl_json_doc_get(c->doc, j, "maxItems"))
            types |= T_ARR;
        if (pl_json_doc_get(c->doc, j, "minLength") || pl_json_doc_get(c->doc, j, "maxLength"))
            types |= T_STR;
        if (!types)
            return build_any(c, ret);
    }
    if (types == T_OBJ || types == T_ARR || types == T_STR || types == T_INT || types == T_NUM ||
        types == (T_INT | T_NUM) || !(types & (T_OBJ | T_ARR | T_STR | T_INT | T_NUM)))
        return compile_typed(c, j, types, depth, ret);

    /* A union: the first byte tells the alternatives apart. */
    uint32_t u, alt;
    int r;
    if ((r = new_gnode(c, K_UNION, &u)) < 0)
        return r;
    uint32_t ml = UINT32_MAX;
    static const unsigned groups[] = {T_OBJ, T_ARR, T_STR, T_INT | T_NUM, T_BOOL | T_NULL};
    for (size_t gi = 0; gi < PL_ARRAY_SIZE(groups); gi++) {
        unsigned t = types & groups[gi];
        if (!t)
            continue;
        if ((r = compile_typed(c, j, t, depth, &alt)) < 0)
            return r;
        struct gnode *n = &c->g->nodes[u];
        uint32_t *slot[] = {&n->u_obj, &n->u_arr, &n->u_str, &n->u_num, &n->u_lit};
        *slot[gi] = alt;
        ml = PL_MIN(ml, c->g->nodes[alt].minlen);
    }
    c->g->nodes[u].minlen = ml;
    *ret = u;
    return 0;
}

int pl_grammar_compile_json(const struct pl_grammar_vocab *v, const char *schema, size_t len,
                            struct pl_grammar **ret, char *err, size_t err_len) {
    if (!ret || (!schema && len > 0))
        return -EINVAL;
    if (err && err_len > 0)
        err[0] = '\0';
    struct pl_grammar *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->vocab = v;
    g->any = NONE;
    g->keystr = NONE;
    struct compiler c = {.g = g, .err = err, .err_len = err_len};
    struct pl_json_doc *doc = NULL;
    int r;
    if (!schema) {
        /* JSON mode: an object with any members. */
        static const char obj[] = "{\"type\":\"object\"}";
        r = pl_json_doc_parse(obj, sizeof(obj) - 1, &doc, err, err_len);
    } else {
        if (len > PL_GRAMMAR_MAX_SCHEMA) {
            r = cfail(&c, -PL_ERR_UNSUPPORTED, "schema above %u bytes", PL_GRAMMAR_MAX_SCHEMA);
            goto fail;
        }
        r = pl_json_doc_parse(schema, len, &doc, err, err_len);
    }
    if (r < 0)
        goto fail;
    c.doc = doc;
    r = compile_schema(&c, &doc->nodes[0], 0, &g->root);
    if (r < 0)
        goto fail;
    pl_json_doc_free(doc);
    free(c.buf);
    *ret = g;
    return 0;
fail:
    pl_json_doc_free(doc);
    free(c.buf);
    pl_grammar_free(g);
    return r;
}

void pl_grammar_free(struct pl_grammar *g) {
    if (!g)
        return;
    free(g->nodes);
    free(g->props);
    free(g->keys);
    free(g->req_sum);
    free(g->req_cnt);
    free(g->opt_min);
    free(g->lits);
    free(g);
}

/* ---- Vocabulary trie ---- */

static int cmp_piece(const void *pa, const void *pb, void *arg) {
    const struct pl_grammar_vocab *v = arg;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->piece_len[a], lb = v->piece_len[b];
    int r = memcmp(v->pieces + v->piece_off[a], v->pieces + v->piece_off[b], PL_MIN(la, lb));
    if (r != 0)
        return r;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : 1;
}

struct build_item {
    uint32_t node, lo, hi, depth;
};

int pl_grammar_vocab_new(const struct pl_tokenizer *t, struct pl_grammar_vocab **ret) {
    if (!t || !ret)
        return -EINVAL;
    uint32_t n = pl_tokenizer_n_vocab(t);
    if (n == 0 || n > INT32_MAX)
        return -EINVAL;
    struct pl_grammar_vocab *v = calloc(1, sizeof(*v));
    struct build_item *queue = NULL;
    size_t cap = 0, used = 0;
    int r = -ENOMEM;
    if (!v)
        return -ENOMEM;
    v->n_vocab = n;
    v->n_words = (n + 63) / 64;
    v->piece_off = calloc(n, sizeof(*v->piece_off));
    v->piece_len = calloc(n, sizeof(*v->piece_len));
    v->order = calloc(n, sizeof(*v->order));
    v->eog = calloc(v->n_words, sizeof(*v->eog));
    if (!v->piece_off || !v->piece_len || !v->order || !v->eog)
        goto fail;

    /* Pieces of the tokens a grammar may emit: not control tokens, 1..MAX_PIECE bytes. */
    char piece[PL_GRAMMAR_MAX_PIECE];
    for (uint32_t id = 0; id < n; id++) {
        if (pl_tokenizer_is_eog(t, (int32_t)id)) {
            v->eog[id / 64] |= 1ull << (id % 64);
            continue;
        }
        if (pl_tokenizer_is_control(t, (int32_t)id))
            continue;
        int k = pl_tokenizer_piece(t, (int32_t)id, piece, sizeof(piece));
        if (k <= 0) /* empty, or longer than MAX_PIECE (-ENOSPC) */
            continue;
        if (used + (size_t)k > cap) {
            size_t nc = cap ? cap * 2 : 1 << 16;
            while (nc < used + (size_t)k)
                nc *= 2;
            char *np = realloc(v->pieces, nc);
            if (!np)
                goto fail;
            v->pieces = np;
            cap = nc;
        }
        if (used > UINT32_MAX - (size_t)k) {
            r = -EINVAL;
            goto fail;
        }
        memcpy(v->pieces + used, piece, (size_t)k);
        v->piece_off[id] = (uint32_t)used;
        v->piece_len[id] = (uint16_t)k;
        used += (size_t)k;
        v->order[v->n_usable++] = (int32_t)id;
        v->max_piece = PL_MAX(v->max_piece, (uint32_t)k);
    }
    qsort_r(v->order, v->n_usable, sizeof(*v->order), cmp_piece, v);

    /* Breadth-first over sorted ranges: a node's tokens share its prefix, those ending at
     * the node sort first, the rest split by their next byte into contiguous children. */
    v->nodes = calloc(used + 1, sizeof(*v->nodes));
    queue = calloc(used + 1, sizeof(*queue));
    if (!v->nodes || !queue)
        goto fail;
    v->n_nodes = 1;
    size_t qh = 0, qt = 0;
    queue[qt++] = (struct build_item){.node = 0, .lo = 0, .hi = v->n_usable, .depth = 0};
    while (qh < qt) {
        struct build_item it = queue[qh++];
        struct vnode *nd = &v->nodes[it.node];
        uint32_t i = it.lo;
        while (i < it.hi && v->piece_len[v->order[i]] == it.depth)
            i++;
        nd->tok0 = it.lo;
        nd->n_tok = i - it.lo;
        nd->child0 = v->n_nodes;
        while (i < it.hi) {
            uint8_t b = (uint8_t)v->pieces[v->piece_off[v->order[i]] + it.depth];
            uint32_t j = i;
            while (j < it.hi && (uint8_t)v->pieces[v->piece_off[v->order[j]] + it.depth] == b)
                j++;
            uint32_t child = v->n_nodes++;
            v->nodes[child].byte = b;
            queue[qt++] =
                (struct build_item){.node = child, .lo = i, .hi = j, .depth = it.depth + 1};
            nd = &v->nodes[it.node];
            nd->n_child++;
            i = j;
        }
    }
    free(queue);
    *ret = v;
    return 0;
fail:
    free(queue);
    pl_grammar_vocab_free(v);
    return r;
}

void pl_grammar_vocab_free(struct pl_grammar_vocab *v) {
    if (!v)
        return;
    free(v->nodes);
    free(v->order);
    free(v->piece_off);
    free(v->piece_len);
    free(v->pieces);
    free(v->eog);
    free(v);
}

/* ---- Generation state ---- */

int pl_grammar_state_new(const struct pl_grammar *g, struct pl_grammar_state **ret) {
    if (!g || !ret)
        return -EINVAL;
    struct pl_grammar_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->g = g;
    const struct pl_grammar_vocab *v = g->vocab;
    size_t levels = (v ? v->max_piece : 0) + 2;
    st->scratch = calloc(levels, sizeof(*st->scratch));
    st->walk_node = calloc(levels, sizeof(*st->walk_node));
    st->walk_next = calloc(levels, sizeof(*st->walk_next));
    if (!st->scratch || !st->walk_node || !st->walk_next)
        goto fail;
    if (v) {
        st->bits = calloc(v->n_words, sizeof(*st->bits));
        if (!st->bits)
            goto fail;
        for (uint32_t i = 0; i < CACHE_SLOTS; i++) {
            st->cache[i].bits = calloc(v->n_words, sizeof(*st->bits));
            if (!st->cache[i].bits)
                goto fail;
        }
    }
    pl_grammar_state_reset(st);
    *ret = st;
    return 0;
fail:
    pl_grammar_state_free(st);
    return -ENOMEM;
}

void pl_grammar_state_free(struct pl_grammar_state *st) {
    if (!st)
        return;
    free(st->scratch);
    free(st->walk_node);
    free(st->walk_next);
    free(st->bits);
    for (uint32_t i = 0; i < CACHE_SLOTS; i++)
        free(st->cache[i].bits);
    free(st);
}

void pl_grammar_state_reset(struct pl_grammar_state *st) {
    if (!st)
        return;
    st->cur.depth = 0;
    st->cur.done = 0;
    st->ended = false;
}

bool pl_grammar_state_complete(const struct pl_grammar_state *st) {
    return st && complete(st->g, &st->cur);
}

uint32_t pl_grammar_state_distance(const struct pl_grammar_state *st) {
    return st ? distance(st->g, &st->cur) : UINT32_MAX;
}

static bool feed_bytes(const struct pl_grammar *g, struct gstate *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed(g, s, (uint8_t)p[i]))
            return false;
    return true;
}

int pl_grammar_feed_text(struct pl_grammar_state *st, const char *text, size_t len) {
    if (!st || (!text && len > 0) || st->ended)
        return -EINVAL;
    struct gstate *tmp = &st->scratch[0];
    state_copy(tmp, &st->cur);
    if (!feed_bytes(st->g, tmp, text, len))
        return -EINVAL;
    state_copy(&st->cur, tmp);
    return 0;
}

int pl_grammar_accept(struct pl_grammar_state *st, int32_t token) {
    if (!st || !st->g->vocab || st->ended)
        return -EINVAL;
    const struct pl_grammar_vocab *v = st->g->vocab;
    if (token < 0 || (uint32_t)token >= v->n_vocab)
        return -EINVAL;
    if (v->eog[token / 64] & (1ull << (token % 64))) {
        if (!complete(st->g, &st->cur))
            return -EINVAL;
        st->ended = true;
        return 1;
    }
    if (v->piece_len[token] == 0)
        return -EINVAL;
    return pl_grammar_feed_text(st, v->pieces + v->piece_off[token], v->piece_len[token]);
}

/* Walk the vocabulary trie from state cur; set bits of accepted tokens. With a limit, only
 * tokens whose distance afterwards is at most limit. Returns the count; *ret_max_dist gets
 * the largest distance after an accepted token. */
static uint32_t walk(struct pl_grammar_state *st, const struct gstate *cur, uint64_t *bits,
                     uint32_t limit, uint32_t *ret_max_dist) {
    const struct pl_grammar *g = st->g;
    const struct pl_grammar_vocab *v = g->vocab;
    uint32_t count = 0, max_dist = 0;
    memset(bits, 0, v->n_words * sizeof(*bits));
    state_copy(&st->scratch[0], cur);
    uint32_t sp = 0;
    st->walk_node[0] = 0;
    st->walk_next[0] = 0;
    for (;;) {
        const struct vnode *nd = &v->nodes[st->walk_node[sp]];
        if (st->walk_next[sp] == nd->n_child) {
            if (sp == 0)
                break;
            sp--;
            continue;
        }
        uint32_t child = nd->child0 + st->walk_next[sp]++;
        const struct vnode *cn = &v->nodes[child];
        struct gstate *s = &st->scratch[sp + 1];
        state_copy(s, &st->scratch[sp]);
        if (!feed(g, s, cn->byte))
            continue; /* the whole subtree is rejected */
        if (cn->n_tok > 0) {
            uint32_t d = distance(g, s);
            if (d <= limit) {
                for (uint32_t k = 0; k < cn->n_tok; k++) {
                    int32_t id = v->order[cn->tok0 + k];
                    bits[id / 64] |= 1ull << (id % 64);
                }
                count += cn->n_tok;
                max_dist = PL_MAX(max_dist, d);
            }
        }
        if (cn->n_child > 0) {
            sp++;
            st->walk_node[sp] = child;
            st->walk_next[sp] = 0;
        }
    }
    *ret_max_dist = max_dist;
    return count;
}

static struct cache_slot *cache_lookup(struct pl_grammar_state *st, const struct gstate *s,
                                       uint64_t h) {
    for (uint32_t i = 0; i < CACHE_SLOTS; i++) {
        struct cache_slot *c = &st->cache[i];
        if (c->valid && c->hash == h && state_equal(&c->key, s))
            return c;
    }
    return NULL;
}

int pl_grammar_mask(struct pl_grammar_state *st, float *logits, uint32_t n_remaining) {
    if (!st || !logits || !st->g->vocab || st->ended)
        return -EINVAL;
    const struct pl_grammar *g = st->g;
    const struct pl_grammar_vocab *v = g->vocab;
    const struct gstate *cur = &st->cur;

    /* Tokens allowed by the grammar alone, from the cache or a fresh walk. */
    uint64_t h = state_hash(cur);
    struct cache_slot *c = cache_lookup(st, cur, h);
    if (!c) {
        c = &st->cache[st->cache_next];
        st->cache_next = (st->cache_next + 1) % CACHE_SLOTS;
        c->valid = false;
        c->n_allowed = walk(st, cur, c->bits, UINT32_MAX, &c->max_dist);
        state_copy(&c->key, cur);
        c->hash = h;
        c->valid = true;
    }
    const uint64_t *bits = c->bits;
    uint32_t n_allowed = c->n_allowed;

    /* Budget: after this token n_remaining - 1 tokens are left, each at least one byte;
     * when even that cannot close the value, insist on tokens that bring it closer. */
    if (n_remaining > 0) {
        uint32_t d = distance(g, cur);
        uint32_t limit = PL_MAX(n_remaining - 1, d > 0 ? d - 1 : 0);
        if (limit < c->max_dist) {
            uint32_t md;
            uint32_t k = walk(st, cur, st->bits, limit, &md);
            if (k > 0) { /* otherwise keep the grammar's set rather than nothing */
                bits = st->bits;
                n_allowed = k;
            }
        }
    }

    bool eog_ok = complete(g, cur);
    for (uint32_t w = 0; w < v->n_words; w++) {
        uint64_t keep = bits[w] | (eog_ok ? v->eog[w] : 0);
        if (keep == ~0ull)
            continue;
        uint32_t base = w * 64, end = PL_MIN(base + 64, v->n_vocab);
        for (uint32_t i = base; i < end; i++)
            if (!(keep & (1ull << (i - base))))
                logits[i] = -INFINITY;
    }
    if (eog_ok)
        for (uint32_t w = 0; w < v->n_words; w++)
            n_allowed += (uint32_t)__builtin_popcountll(v->eog[w]);
    return (int)n_allowed;
}
