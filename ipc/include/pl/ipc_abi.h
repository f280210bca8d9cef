/* SPDX-License-Identifier: MIT */
/* The shared-memory and handshake wire layout between picolmd and libpicolm. Treat it like a
 * kernel uapi header: shared verbatim by both sides, fixed-width fields only, no pointers,
 * reserved fields zero, every size and offset pinned by a _Static_assert. Little-endian only.
 *
 * Region (one memfd per client, created and sealed by the broker):
 *
 *   offset 0       struct pl_ipc_region_hdr     (header_bytes long, describes everything else)
 *   sq.ctrl_offset struct pl_ipc_ring_ctrl      submission ring control (client -> broker)
 *   cq.ctrl_offset struct pl_ipc_ring_ctrl      completion ring control (broker -> client)
 *   sq.data_offset sq.data_bytes of records     (a power of two)
 *   cq.data_offset cq.data_bytes of records
 *
 * Readers locate sub-regions only through the header's offsets, so the layout can grow.
 *
 * Records. A ring's data area holds variable-length records, each
 * `struct pl_ipc_rec_hdr {len, type}` + len payload bytes + zero..7 padding bytes, so every
 * record starts 8-byte aligned and occupies PL_IPC_REC_SPAN(len) bytes. Records never wrap:
 * when a record does not fit between the write position and the end of the data area, the
 * producer first fills that tail with one PL_IPC_REC_PAD record (its len covers exactly the
 * tail) and writes the record at offset 0. A record's span is at most max_record_bytes, which
 * is at most half the data area, so an empty ring always accepts a maximal record.
 *
 * Indices. prod and cons are free-running uint32 byte counters (they wrap modulo 2^32); the
 * byte at counter i lives at data[i & (data_bytes - 1)]. prod - cons (mod 2^32) is the number
 * of published, unconsumed bytes and never exceeds data_bytes. Both are multiples of 8.
 *
 * Ownership of the control block: each 64-byte line has exactly one writer.
 *   line 0  prod        producer only
 *   line 1  cons        consumer only
 *   line 2  cons_flags, cons_sleep_seq  consumer only: "I sleep until data comes"
 *   line 3  prod_flags, prod_sleep_seq  producer only: "I sleep until space frees"
 * Flags sit on their own lines so that the steady-state reads of them by the other side hit a
 * line that does not change.
 *
 * Sleeping (minor 1). A side about to sleep stores its sleep_seq (a fresh non-zero number per
 * sleep), then its flags with release: PL_IPC_RING_NEED_WAKEUP alone = "ring my doorbell
 * (eventfd)"; NEED_WAKEUP | PL_IPC_RING_WAKE_FUTEX = "I sleep in FUTEX_WAIT on your index word
 * (prod when I consume, cons when I produce): FUTEX_WAKE it instead". One wake-up per sleep is
 * enough: a waker may skip the wake when it already woke the same non-zero sleep_seq. A
 * sleep_seq of 0 (minor-0 peers) is woken on every publish that sees the flag. A waiter may set
 * WAKE_FUTEX only when its peer honours it: the client when the region header carries
 * PL_IPC_FEATURE_FUTEX_WAKE, the broker when the client's hello says minor >= 1. picolmd never
 * writes or reads an eventfd it shares with a client (the client could make it blocking): it
 * wakes every client sleep with FUTEX_WAKE on the index word, so a client must sleep on that
 * word (NEED_WAKEUP | WAKE_FUTEX), and it refuses minor-0 clients. */
#ifndef PL_IPC_IPC_ABI_H
#define PL_IPC_IPC_ABI_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "picolm's shared-memory ABI is little-endian only"
#endif

#define PL_IPC_ABI_MAJOR 1u
#define PL_IPC_ABI_MINOR 1u

/* "PLIPCRG1" read as a little-endian u64. */
#define PL_IPC_REGION_MAGIC 0x3147524350494c50ull
/* "PLHELLO1" / "PLWELCM1" for the handshake messages. */
#define PL_IPC_HELLO_MAGIC 0x314f4c4c45484c50ull
#define PL_IPC_WELCOME_MAGIC 0x314d434c45574c50ull

#define PL_IPC_CACHE_LINE 64u

/* ---- Region header ---- */

/* Where one ring lives inside the region. Offsets are from the start of the region. */
struct pl_ipc_ring_desc {
    uint64_t ctrl_offset;      /* struct pl_ipc_ring_ctrl, 64-byte aligned */
    uint64_t ctrl_bytes;       /* >= sizeof(struct pl_ipc_ring_ctrl) */
    uint64_t data_offset;      /* record area, 64-byte aligned */
    uint64_t data_bytes;       /* power of two, PL_IPC_RING_MIN_BYTES..PL_IPC_RING_MAX_BYTES */
    uint32_t max_record_bytes; /* largest record span (header + payload + padding) */
    uint32_t reserved;         /* zero */
};

struct pl_ipc_region_hdr {
    uint64_t magic;             /* PL_IPC_REGION_MAGIC */
    _Atomic uint32_t abi_major; /* stored last with release: non-zero = header complete */
    uint32_t abi_minor;         /* a reader accepts any minor of its major */
    uint32_t header_bytes;      /* size of this header as written by the creator */
    uint32_t features;          /* PL_IPC_FEATURE_*; readers ignore bits they do not know */
    uint64_t region_bytes;      /* total size of the memfd */
    struct pl_ipc_ring_desc sq; /* submissions: client produces, broker consumes */
    struct pl_ipc_ring_desc cq; /* completions: broker produces, client consumes */
    uint64_t reserved[18];      /* zero in minor 0 */
};

/* Region features (pl_ipc_region_hdr.features). */
/* The creator (broker) honours PL_IPC_RING_WAKE_FUTEX on both rings (minor 1). */
#define PL_IPC_FEATURE_FUTEX_WAKE 1u

/* ---- Ring control block ---- */

#define PL_IPC_RING_NEED_WAKEUP 1u
/* With NEED_WAKEUP: wake me with FUTEX_WAKE on your index word, not with the doorbell. */
#define PL_IPC_RING_WAKE_FUTEX 2u

struct pl_ipc_ring_ctrl {
    alignas(64) _Atomic uint32_t prod; /* producer's free-running byte index */
    uint32_t prod_reserved[15];
    alignas(64) _Atomic uint32_t cons; /* consumer's free-running byte index */
    uint32_t cons_reserved[15];
    alignas(64) _Atomic uint32_t cons_flags; /* written by the consumer only */
    _Atomic uint32_t cons_sleep_seq;         /* consumer only: its current sleep (minor 1) */
    uint32_t cons_flags_reserved[14];
    alignas(64) _Atomic uint32_t prod_flags; /* written by the producer only */
    _Atomic uint32_t prod_sleep_seq;         /* producer only: its current sleep (minor 1) */
    uint32_t prod_flags_reserved[14];
};

/* ---- Records ---- */

struct pl_ipc_rec_hdr {
    uint32_t len;  /* payload bytes, excluding this header and the padding */
    uint32_t type; /* caller-defined; PL_IPC_REC_TYPE_RESERVED and above belong to ipc */
};

#define PL_IPC_REC_ALIGN 8u
#define PL_IPC_REC_HDR_BYTES ((uint32_t)sizeof(struct pl_ipc_rec_hdr))
/* Bytes a record with len payload bytes occupies. len must be <= PL_IPC_RING_MAX_BYTES. */
#define PL_IPC_REC_SPAN(len) (PL_IPC_REC_HDR_BYTES + (((uint32_t)(len) + 7u) & ~7u))
/* Types from here up are reserved for ipc itself; a caller may not send them. */
#define PL_IPC_REC_TYPE_RESERVED 0xffffff00u
/* Filler from the write position to the end of the data area (see "Records" above). */
#define PL_IPC_REC_PAD 0xffffffffu

#define PL_IPC_RING_MIN_BYTES 256u
#define PL_IPC_RING_MAX_BYTES (1u << 30)

/* ---- Handshake messages (SOCK_SEQPACKET, one message each way) ---- */

/* client -> broker, no fds. */
struct pl_ipc_hello {
    uint64_t magic;     /* PL_IPC_HELLO_MAGIC */
    uint32_t abi_major; /* PL_IPC_ABI_MAJOR of the client */
    uint32_t abi_minor;
    uint32_t flags; /* zero: no flags are defined */
    uint32_t reserved[3];
};

/* Outcome carried by the welcome. */
enum pl_ipc_welcome_status {
    PL_IPC_WELCOME_OK = 0,
    PL_IPC_WELCOME_VERSION = 1, /* the broker does not speak the client's major */
    PL_IPC_WELCOME_DENIED = 2,  /* the caller's policy refused this peer */
    PL_IPC_WELCOME_BUSY = 3,    /* the broker is out of sessions */
    PL_IPC_WELCOME_ERROR = 4,   /* the broker failed to set the session up */
    PL_IPC_WELCOME_QUOTA = 5,   /* a policy limit refused this peer (max_sessions per user) */
};

/* broker -> client. With status OK it carries exactly PL_IPC_WELCOME_N_FDS fds in one
 * SCM_RIGHTS message, in this order: region memfd, broker doorbell (client writes it to wake
 * the broker), client doorbell (the broker writes it to wake the client). Otherwise no fds. */
#define PL_IPC_WELCOME_N_FDS 3
struct pl_ipc_welcome {
    uint64_t magic;     /* PL_IPC_WELCOME_MAGIC */
    uint32_t abi_major; /* the broker's */
    uint32_t abi_minor;
    uint32_t status; /* enum pl_ipc_welcome_status, as uint32 */
    uint32_t n_fds;  /* PL_IPC_WELCOME_N_FDS when status is OK, else 0 */
    uint64_t session_id;
    uint64_t region_bytes;
    uint32_t reserved[4];
};

/* ---- Layout checks ---- */

_Static_assert(sizeof(_Atomic uint32_t) == 4, "atomic u32 must be plain-sized");
_Static_assert(sizeof(struct pl_ipc_ring_desc) == 40, "ring desc size");
_Static_assert(offsetof(struct pl_ipc_ring_desc, ctrl_offset) == 0, "ring desc layout");
_Static_assert(offsetof(struct pl_ipc_ring_desc, ctrl_bytes) == 8, "ring desc layout");
_Static_assert(offsetof(struct pl_ipc_ring_desc, data_offset) == 16, "ring desc layout");
_Static_assert(offsetof(struct pl_ipc_ring_desc, data_bytes) == 24, "ring desc layout");
_Static_assert(offsetof(struct pl_ipc_ring_desc, max_record_bytes) == 32, "ring desc layout");
_Static_assert(offsetof(struct pl_ipc_ring_desc, reserved) == 36, "ring desc layout");

_Static_assert(sizeof(struct pl_ipc_region_hdr) == 256, "region header size");
_Static_assert(offsetof(struct pl_ipc_region_hdr, magic) == 0, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, abi_major) == 8, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, abi_minor) == 12, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, header_bytes) == 16, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, features) == 20, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, region_bytes) == 24, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, sq) == 32, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, cq) == 72, "region header layout");
_Static_assert(offsetof(struct pl_ipc_region_hdr, reserved) == 112, "region header layout");

_Static_assert(sizeof(struct pl_ipc_ring_ctrl) == 256, "ring ctrl size");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, prod) == 0, "ring ctrl layout");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, cons) == 64, "ring ctrl layout");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, cons_flags) == 128, "ring ctrl layout");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, prod_flags) == 192, "ring ctrl layout");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, cons_sleep_seq) == 132, "ring ctrl layout");
_Static_assert(offsetof(struct pl_ipc_ring_ctrl, prod_sleep_seq) == 196, "ring ctrl layout");

_Static_assert(sizeof(struct pl_ipc_rec_hdr) == 8, "record header size");
_Static_assert(offsetof(struct pl_ipc_rec_hdr, len) == 0, "record header layout");
_Static_assert(offsetof(struct pl_ipc_rec_hdr, type) == 4, "record header layout");

_Static_assert(sizeof(struct pl_ipc_hello) == 32, "hello size");
_Static_assert(offsetof(struct pl_ipc_hello, abi_major) == 8, "hello layout");
_Static_assert(offsetof(struct pl_ipc_hello, abi_minor) == 12, "hello layout");
_Static_assert(offsetof(struct pl_ipc_hello, flags) == 16, "hello layout");
_Static_assert(offsetof(struct pl_ipc_hello, reserved) == 20, "hello layout");

_Static_assert(sizeof(struct pl_ipc_welcome) == 56, "welcome size");
_Static_assert(offsetof(struct pl_ipc_welcome, abi_major) == 8, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, abi_minor) == 12, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, status) == 16, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, n_fds) == 20, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, session_id) == 24, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, region_bytes) == 32, "welcome layout");
_Static_assert(offsetof(struct pl_ipc_welcome, reserved) == 40, "welcome layout");

#endif
