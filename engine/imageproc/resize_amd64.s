#include "textflag.h"

// AVX2 kernels of the bicubic resize (resize.go). Integer arithmetic only, in the same
// order of operations as the scalar Go code, so the results are identical: each output
// sample is 1<<21 plus the sum of sample*coefficient products in int32, then
// clip8 (>>22, clamped to 0..255).

DATA half<>+0(SB)/4, $0x200000
GLOBL half<>(SB), RODATA|NOPTR, $4

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

// The byte shuffles of hquadAVX2, from 16 bytes loaded at a quad's first pixel (the same
// 16 bytes in both halves of the register): the low half takes the word pairs (p0.c,
// p1.c) of each channel c, the high half (p2.c, p3.c); an index of 0xFF gives a zero
// byte. quad4 is for 4-byte pixels, quad3 for 3-byte pixels (its fourth channel is 0).
DATA quad4<>+0(SB)/8, $0xFF05FF01FF04FF00
DATA quad4<>+8(SB)/8, $0xFF07FF03FF06FF02
DATA quad4<>+16(SB)/8, $0xFF0DFF09FF0CFF08
DATA quad4<>+24(SB)/8, $0xFF0FFF0BFF0EFF0A
GLOBL quad4<>(SB), RODATA|NOPTR, $32

DATA quad3<>+0(SB)/8, $0xFF04FF01FF03FF00
DATA quad3<>+8(SB)/8, $0xFFFFFFFFFF05FF02
DATA quad3<>+16(SB)/8, $0xFF0AFF07FF09FF06
DATA quad3<>+24(SB)/8, $0xFFFFFFFFFF0BFF08
GLOBL quad3<>(SB), RODATA|NOPTR, $32

// func quadMask(bpp int) *byte returns the shuffle for bpp-byte pixels.
TEXT ·quadMask(SB), NOSPLIT, $0-16
	MOVQ bpp+0(FP), AX
	LEAQ quad4<>(SB), BX
	CMPQ AX, $4
	JEQ  qm
	LEAQ quad3<>(SB), BX
qm:
	MOVQ BX, ret+8(FP)
	RET

// func hquadAVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int16, outW int, mask *byte, bpp int) (alpha255 bool)
//
// The horizontal pass over four rows of bpp-byte pixels (rows r < 4 at src+r*srcStride,
// written to dst+r*dstStride; strides of 0 repeat one row), four taps at a time with
// VPMADDWD. A coefficient c (22 fractional bits, |c| < 2^22) is split into hi = c>>11
// and lo = c&2047, both int16: the sum is (sum p*hi)<<11 + sum p*lo + 1<<21, exactly the
// int32 sum of the scalar code (which fits int32, so the wrap-around of the shift is
// harmless). k holds, per output, (n+3)/4 quads of 64 bytes (quadTaps): the hi words,
// then the lo words, each laid out as the shuffle leaves the pixels. bounds[2x] is the
// output's first source byte, bounds[2x+1] its quad count. A quad reads 16 bytes from its
// first pixel: up to 13 past a row's last pixel. mask is quadMask(bpp). alpha255 reports
// whether every fourth byte of all it loaded was 255: for 4-byte pixels, that every pixel
// it read is opaque (bytes past a row are read too, so false may also mean that they
// were not).
TEXT ·hquadAVX2(SB), NOSPLIT, $0-73
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R13
	MOVQ src+16(FP), R8
	MOVQ srcStride+24(FP), R14
	MOVQ bounds+32(FP), BX
	MOVQ k+40(FP), DX
	MOVQ outW+48(FP), R10
	LEAQ (R14)(R14*2), R15 // 3 * srcStride
	LEAQ (R13)(R13*2), R12 // 3 * dstStride
	MOVQ mask+56(FP), AX
	VMOVDQU (AX), Y15
	MOVQ bpp+64(FP), R11
	SHLQ $2, R11 // the bytes of four pixels
	VPBROADCASTD half<>(SB), X12 // the high half of Y12 is zero
	VPCMPEQB Y11, Y11, Y11       // the AND of every loaded byte
	TESTQ R10, R10
	JZ   qdone

qpixel:
	MOVLQSX (BX), SI
	ADDQ R8, SI
	MOVLQSX 4(BX), CX
	VPXOR Y0, Y0, Y0
	VMOVDQA Y12, Y1
	VPXOR Y2, Y2, Y2
	VMOVDQA Y12, Y3
	VPXOR Y4, Y4, Y4
	VMOVDQA Y12, Y5
	VPXOR Y6, Y6, Y6
	VMOVDQA Y12, Y7
	TESTQ CX, CX
	JZ   qfold

qquad:
	VMOVDQU (DX), Y13   // hi
	VMOVDQU 32(DX), Y14 // lo
	VBROADCASTI128 (SI), Y8
	VPAND Y8, Y11, Y11
	VPSHUFB Y15, Y8, Y8
	VPMADDWD Y13, Y8, Y9
	VPMADDWD Y14, Y8, Y8
	VPADDD Y9, Y0, Y0
	VPADDD Y8, Y1, Y1
	VBROADCASTI128 (SI)(R14*1), Y8
	VPAND Y8, Y11, Y11
	VPSHUFB Y15, Y8, Y8
	VPMADDWD Y13, Y8, Y9
	VPMADDWD Y14, Y8, Y8
	VPADDD Y9, Y2, Y2
	VPADDD Y8, Y3, Y3
	VBROADCASTI128 (SI)(R14*2), Y8
	VPAND Y8, Y11, Y11
	VPSHUFB Y15, Y8, Y8
	VPMADDWD Y13, Y8, Y9
	VPMADDWD Y14, Y8, Y8
	VPADDD Y9, Y4, Y4
	VPADDD Y8, Y5, Y5
	VBROADCASTI128 (SI)(R15*1), Y8
	VPAND Y8, Y11, Y11
	VPSHUFB Y15, Y8, Y8
	VPMADDWD Y13, Y8, Y9
	VPMADDWD Y14, Y8, Y8
	VPADDD Y9, Y6, Y6
	VPADDD Y8, Y7, Y7
	ADDQ R11, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  qquad

qfold:
	VPSLLD $11, Y0, Y0
	VPADDD Y1, Y0, Y0 // row 0: taps 0,1 of each quad in the low half, 2,3 in the high
	VPSLLD $11, Y2, Y2
	VPADDD Y3, Y2, Y2 // row 1
	VPSLLD $11, Y4, Y4
	VPADDD Y5, Y4, Y4 // row 2
	VPSLLD $11, Y6, Y6
	VPADDD Y7, Y6, Y6 // row 3
	VPERM2I128 $0x20, Y2, Y0, Y8
	VPERM2I128 $0x31, Y2, Y0, Y9
	VPADDD Y9, Y8, Y8 // [row0 | row1]
	VPERM2I128 $0x20, Y6, Y4, Y9
	VPERM2I128 $0x31, Y6, Y4, Y10
	VPADDD Y10, Y9, Y9 // [row2 | row3]
	VPSRAD $22, Y8, Y8
	VPSRAD $22, Y9, Y9
	VPACKSSDW Y9, Y8, Y8 // lane0: row0, row2; lane1: row1, row3 (int16)
	VEXTRACTI128 $1, Y8, X9
	VPACKUSWB X9, X8, X8 // bytes: row0(4) row2(4) row1(4) row3(4)
	VMOVD X8, AX
	MOVW AX, (DI)
	SHRL $16, AX
	MOVB AX, 2(DI)
	VPEXTRD $2, X8, AX
	MOVW AX, (DI)(R13*1)
	SHRL $16, AX
	MOVB AX, 2(DI)(R13*1)
	VPEXTRD $1, X8, AX
	MOVW AX, (DI)(R13*2)
	SHRL $16, AX
	MOVB AX, 2(DI)(R13*2)
	VPEXTRD $3, X8, AX
	MOVW AX, (DI)(R12*1)
	SHRL $16, AX
	MOVB AX, 2(DI)(R12*1)
	ADDQ $3, DI
	ADDQ $8, BX
	DECQ R10
	JNZ  qpixel

qdone:
	VPCMPEQB Y14, Y14, Y14
	VPCMPEQB Y14, Y11, Y11
	VPMOVMSKB Y11, AX
	ANDL $0x88888888, AX
	CMPL AX, $0x88888888
	SETEQ alpha255+72(FP)
	VZEROUPPER
	RET
