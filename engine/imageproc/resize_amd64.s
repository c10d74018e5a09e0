#include "textflag.h"

// AVX2 kernels of the bicubic resize (resize.go). Integer arithmetic only, in the same
// order of operations as the scalar Go code, so the results are identical: each output
// sample is 1<<21 plus the sum of sample*coefficient products in int32, then
// clip8 (>>22, clamped to 0..255).

DATA half<>+0(SB)/4, $0x200000
GLOBL half<>(SB), RODATA|NOPTR, $4

// func hrowAVX2(dst, src *byte, bounds *int32, k *int32, outW, ksize, bpp int)
//
// One row of the horizontal pass. Output pixel x (3 bytes at dst+3x) is the sum over
// its bounds[2x+1] taps of the pixel at src + bounds[2x] + i*bpp times k[x*ksize+i],
// for the first three channels. Each tap loads 4 bytes: a 3-byte layout reads one byte
// of the next pixel, which lands in the ignored fourth lane (the caller makes sure that
// byte is readable).
TEXT ·hrowAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), R8
	MOVQ bounds+16(FP), BX
	MOVQ k+24(FP), R9
	MOVQ outW+32(FP), R10
	MOVQ ksize+40(FP), R11
	SHLQ $2, R11
	MOVQ bpp+48(FP), R12
	VPBROADCASTD half<>(SB), X5
	TESTQ R10, R10
	JZ   hdone

hpixel:
	MOVLQSX (BX), SI
	ADDQ R8, SI
	MOVLQSX 4(BX), CX
	MOVQ R9, DX
	VMOVDQA X5, X0
	TESTQ CX, CX
	JZ   hstore

htap:
	VPMOVZXBD (SI), X1
	VPBROADCASTD (DX), X2
	VPMULLD X2, X1, X1
	VPADDD X1, X0, X0
	ADDQ R12, SI
	ADDQ $4, DX
	DECQ CX
	JNZ  htap

hstore:
	VPSRAD $22, X0, X0
	VPACKSSDW X0, X0, X0
	VPACKUSWB X0, X0, X0
	VMOVD X0, AX
	MOVW AX, (DI)
	SHRL $16, AX
	MOVB AX, 2(DI)
	ADDQ $3, DI
	ADDQ $8, BX
	ADDQ R11, R9
	DECQ R10
	JNZ  hpixel

hdone:
	VZEROUPPER
	RET

// func vrowAVX2(dst, src *byte, stride, blocks int, k *int32, n int)
//
// One output row of the vertical pass over 16*blocks bytes: byte j of dst is the sum
// over n taps of src[i*stride + j] times k[i].
TEXT ·vrowAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), R8
	MOVQ stride+16(FP), R12
	MOVQ blocks+24(FP), R10
	MOVQ k+32(FP), R9
	MOVQ n+40(FP), R11
	VPBROADCASTD half<>(SB), Y5
	TESTQ R10, R10
	JZ   vdone

vblock:
	VMOVDQA Y5, Y0
	VMOVDQA Y5, Y1
	MOVQ R8, SI
	MOVQ R9, DX
	MOVQ R11, CX
	TESTQ CX, CX
	JZ   vstore

vtap:
	VPBROADCASTD (DX), Y2
	VPMOVZXBD (SI), Y3
	VPMOVZXBD 8(SI), Y4
	VPMULLD Y2, Y3, Y3
	VPMULLD Y2, Y4, Y4
	VPADDD Y3, Y0, Y0
	VPADDD Y4, Y1, Y1
	ADDQ R12, SI
	ADDQ $4, DX
	DECQ CX
	JNZ  vtap

vstore:
	VPSRAD $22, Y0, Y0
	VPSRAD $22, Y1, Y1
	VPACKSSDW Y1, Y0, Y0
	VPERMQ $0xD8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VMOVDQU X0, (DI)
	ADDQ $16, DI
	ADDQ $16, R8
	DECQ R10
	JNZ  vblock

vdone:
	VZEROUPPER
	RET

// func hrow4AVX2(dst, src *byte, bounds *int32, k *int32, outW int)
//
// hrowAVX2 for 4-byte pixels, two taps at a time: one 8-byte load is two pixels, k holds
// for each output its taps in pairs as eight int32 (pairTaps), and bounds[2x+1] counts
// the pairs. The low half of the accumulator starts at 1<<21, the high half at 0; they
// are added before the clip.
TEXT ·hrow4AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), R8
	MOVQ bounds+16(FP), BX
	MOVQ k+24(FP), DX
	MOVQ outW+32(FP), R10
	VPBROADCASTD half<>(SB), X5 // VEX: the high half of Y5 is zero
	TESTQ R10, R10
	JZ   h4done

h4pixel:
	MOVLQSX (BX), SI
	ADDQ R8, SI
	MOVLQSX 4(BX), CX
	VMOVDQA Y5, Y0
	TESTQ CX, CX
	JZ   h4fold

h4pair:
	VPMOVZXBD (SI), Y1
	VPMULLD (DX), Y1, Y1
	VPADDD Y1, Y0, Y0
	ADDQ $8, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  h4pair

h4fold:
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSRAD $22, X0, X0
	VPACKSSDW X0, X0, X0
	VPACKUSWB X0, X0, X0
	VMOVD X0, AX
	MOVW AX, (DI)
	SHRL $16, AX
	MOVB AX, 2(DI)
	ADDQ $3, DI
	ADDQ $8, BX
	DECQ R10
	JNZ  h4pixel

h4done:
	VZEROUPPER
	RET

// func hrow4x4AVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int32, outW int)
//
// hrow4AVX2 on four rows at once (rows dst+r*dstStride from src+r*srcStride, r < 4):
// each pair of coefficients is loaded once for the four rows, and the four independent
// sums keep the multiplier busy.
TEXT ·hrow4x4AVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R13
	MOVQ src+16(FP), R8
	MOVQ srcStride+24(FP), R14
	MOVQ bounds+32(FP), BX
	MOVQ k+40(FP), DX
	MOVQ outW+48(FP), R10
	LEAQ (R14)(R14*2), R15 // 3 * srcStride
	LEAQ (R13)(R13*2), R12 // 3 * dstStride
	VPBROADCASTD half<>(SB), X5
	TESTQ R10, R10
	JZ   q4done

q4pixel:
	MOVLQSX (BX), SI
	ADDQ R8, SI
	MOVLQSX 4(BX), CX
	VMOVDQA Y5, Y0
	VMOVDQA Y5, Y1
	VMOVDQA Y5, Y2
	VMOVDQA Y5, Y3
	TESTQ CX, CX
	JZ   q4fold

q4pair:
	VMOVDQU (DX), Y6
	VPMOVZXBD (SI), Y7
	VPMOVZXBD (SI)(R14*1), Y8
	VPMOVZXBD (SI)(R14*2), Y9
	VPMOVZXBD (SI)(R15*1), Y10
	VPMULLD Y6, Y7, Y7
	VPMULLD Y6, Y8, Y8
	VPMULLD Y6, Y9, Y9
	VPMULLD Y6, Y10, Y10
	VPADDD Y7, Y0, Y0
	VPADDD Y8, Y1, Y1
	VPADDD Y9, Y2, Y2
	VPADDD Y10, Y3, Y3
	ADDQ $8, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  q4pair

q4fold:
	// rows 0, 1 in Y0, Y1 -> X0: [row0 lanes, row1 lanes] after folding halves;
	// likewise rows 2, 3 -> X2. Then one pack of 16 int32 to 16 bytes.
	VPERM2I128 $0x20, Y1, Y0, Y7 // low halves: row0 lo, row1 lo
	VPERM2I128 $0x31, Y1, Y0, Y8 // high halves: row0 hi, row1 hi
	VPADDD Y8, Y7, Y7            // [row0 sum | row1 sum]
	VPERM2I128 $0x20, Y3, Y2, Y9
	VPERM2I128 $0x31, Y3, Y2, Y10
	VPADDD Y10, Y9, Y9           // [row2 sum | row3 sum]
	VPSRAD $22, Y7, Y7
	VPSRAD $22, Y9, Y9
	VPACKSSDW Y9, Y7, Y7         // lane0: row0, row2; lane1: row1, row3 (int16)
	VEXTRACTI128 $1, Y7, X8
	VPACKUSWB X8, X7, X7         // bytes: row0(4) row2(4) row1(4) row3(4)
	VMOVD X7, AX
	MOVW AX, (DI)
	SHRL $16, AX
	MOVB AX, 2(DI)
	VPEXTRD $2, X7, AX
	MOVW AX, (DI)(R13*1)
	SHRL $16, AX
	MOVB AX, 2(DI)(R13*1)
	VPEXTRD $1, X7, AX
	MOVW AX, (DI)(R13*2)
	SHRL $16, AX
	MOVB AX, 2(DI)(R13*2)
	VPEXTRD $3, X7, AX
	MOVW AX, (DI)(R12*1)
	SHRL $16, AX
	MOVB AX, 2(DI)(R12*1)
	ADDQ $3, DI
	ADDQ $8, BX
	DECQ R10
	JNZ  q4pixel

q4done:
	VZEROUPPER
	RET
