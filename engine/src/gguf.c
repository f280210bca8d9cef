/* SPDX-License-Identifier: MIT */
/* GGUF reader: being written under issue #2 (E1). */
#include "pl/engine_gguf.h"
