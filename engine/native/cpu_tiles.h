/*
 * cpu_tiles.h - the tile walk shared by the batched matrix-vector kernels of every weight
 * format (cpu_kernels.c: bf16, f16, f32; cpu_kernels_q8.c: int8).
 */
#ifndef LA_CPU_TILES_H
#define LA_CPU_TILES_H

#include "cpu_internal.h"

/* TILE_WALK computes rows weight rows (of dtype t, rows ldw elements long) against nx
 * activation rows: weight rows in tiles of RMAX (single rows for the remainder),
 * sequences in groups of up to CMAX, each (R, C) pair a constant so the tile's loops
 * unroll into straight register code. All the sequence groups of one row tile run back
 * to back, so its weights come from DRAM once and from L1/L2 after. TILE is called as
 * TILE(t, w, ldw, n, x, ldx, y, ldy, R, C); the row stride in bytes is
 * cpu_row_bytes(t, ldw), which covers the int8 rows with their scales too. */
#define TILE_WALK(TILE, RMAX, CMAX, t, w, ldw, rows, n, x, ldx, nx, y, ldy)                      \
    do {                                                                                       \
        const size_t stride_ = cpu_row_bytes(t, (int)(ldw));                                   \
        for (int r_ = 0; r_ < (rows);) {                                                       \
            const int R_ = (rows) - r_ >= (RMAX) ? (RMAX) : 1;                                 \
            const void *wr_ = (const char *)(w) + (size_t)r_ * stride_;                        \
            for (int c_ = 0; c_ < (nx); c_ += (CMAX)) {                                        \
                const int C_ = (nx) - c_ < (CMAX) ? (nx) - c_ : (CMAX);                        \
                const float *xc_ = (x) + (size_t)c_ * (ldx);                                   \
                float *yc_ = (y) + (size_t)c_ * (ldy) + (size_t)r_;                            \
                switch (R_ * 16 + C_) {                                                        \
                case (RMAX) * 16 + 1: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, RMAX, 1); break; \
                case (RMAX) * 16 + 2: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, RMAX, 2); break; \
                case (RMAX) * 16 + 3: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, RMAX, 3); break; \
                case (RMAX) * 16 + 4: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, RMAX, 4); break; \
                case 1 * 16 + 1: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, 1, 1); break;         \
                case 1 * 16 + 2: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, 1, 2); break;         \
                case 1 * 16 + 3: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, 1, 3); break;         \
                case 1 * 16 + 4: TILE(t, wr_, ldw, n, xc_, ldx, yc_, ldy, 1, 4); break;         \
                }                                                                              \
            }                                                                                  \
            r_ += R_;                                                                          \
        }                                                                                      \
    } while (0)

#endif /* LA_CPU_TILES_H */
