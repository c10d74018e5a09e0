// JPEG encoding through the system libjpeg(-turbo): RGB or RGBX rows in, a JFIF file out.
//
// As in decode.c, errors never leave libjpeg through exit(): error_exit longjmps back
// here, which frees the compressor and the output buffer and reports the message code
// and template. Warnings and trace messages are never printed.
//
// Everything the longjmp path reads (the compressor, the error manager, the output
// buffer) lives in one heap block whose address is fixed before setjmp, so nothing it
// needs is a local variable changed between setjmp and longjmp.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "encode.h"

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
} la_enc_error_mgr;

// la_dest_mgr writes into one malloc'd buffer that doubles when full.
typedef struct {
	struct jpeg_destination_mgr pub;
	unsigned char *buf;
	size_t cap;
} la_dest_mgr;

typedef struct {
	struct jpeg_compress_struct cinfo;
	la_enc_error_mgr err;
	la_dest_mgr dest;
} la_enc_state;

static void la_enc_error_exit(j_common_ptr cinfo) {
	la_enc_error_mgr *err = (la_enc_error_mgr *)cinfo->err;
	longjmp(err->jump, 1);
}

static void la_enc_emit_message(j_common_ptr cinfo, int level) {
	if (level < 0) {
		cinfo->err->num_warnings++; // a warning does not stop the encoder
	}
}

static void la_enc_output_message(j_common_ptr cinfo) {
	(void)cinfo; // never print
}

static void la_dest_init(j_compress_ptr cinfo) {
	la_dest_mgr *d = (la_dest_mgr *)cinfo->dest;
	d->pub.next_output_byte = d->buf;
	d->pub.free_in_buffer = d->cap;
}

// Called when free_in_buffer reaches 0: the whole buffer holds output.
static boolean la_dest_empty(j_compress_ptr cinfo) {
	la_dest_mgr *d = (la_dest_mgr *)cinfo->dest;
	size_t ncap = d->cap * 2;
	unsigned char *nbuf = ncap > d->cap ? realloc(d->buf, ncap) : NULL;
	if (nbuf == NULL) {
		ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
	}
	d->pub.next_output_byte = nbuf + d->cap;
	d->pub.free_in_buffer = ncap - d->cap;
	d->buf = nbuf;
	d->cap = ncap;
	return TRUE;
}

static void la_dest_term(j_compress_ptr cinfo) {
	(void)cinfo; // the size is cap - free_in_buffer, read by the caller
}

static void la_enc_record(la_enc_state *s, la_jpeg_info *info) {
	const struct jpeg_error_mgr *e = &s->err.pub;
	int code = e->msg_code;
	info->msg_code = code;
	info->msg[0] = 0;
	if (code > 0 && code <= e->last_jpeg_message && e->jpeg_message_table[code] != NULL) {
		strncpy(info->msg, e->jpeg_message_table[code], sizeof(info->msg) - 1);
		info->msg[sizeof(info->msg) - 1] = 0;
	}
}

int la_jpeg_encode(const unsigned char *pix, size_t stride, int width, int height,
                   int bytes_per_pixel, const la_jpeg_encode_opts *opts,
                   unsigned char **out, size_t *out_size, la_jpeg_info *info) {
	memset(info, 0, sizeof(*info));
	*out = NULL;
	*out_size = 0;
	la_enc_state *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		info->msg_code = JERR_OUT_OF_MEMORY;
		strcpy(info->msg, "Insufficient memory (case %d)");
		return LA_JPEG_ERROR;
	}
	// A first guess of a quarter of a byte per pixel; la_dest_empty doubles it as needed.
	s->dest.cap = (size_t)width * (size_t)height / 4 + 4096;
	s->dest.buf = malloc(s->dest.cap);
	if (s->dest.buf == NULL) {
		free(s);
		info->msg_code = JERR_OUT_OF_MEMORY;
		strcpy(info->msg, "Insufficient memory (case %d)");
		return LA_JPEG_ERROR;
	}
	if (setjmp(s->err.jump)) {
		la_enc_record(s, info);
		jpeg_destroy_compress(&s->cinfo);
		free(s->dest.buf);
		free(s);
		return LA_JPEG_ERROR;
	}
	s->cinfo.err = jpeg_std_error(&s->err.pub);
	s->err.pub.error_exit = la_enc_error_exit;
	s->err.pub.emit_message = la_enc_emit_message;
	s->err.pub.output_message = la_enc_output_message;
	jpeg_create_compress(&s->cinfo);
	s->dest.pub.init_destination = la_dest_init;
	s->dest.pub.empty_output_buffer = la_dest_empty;
	s->dest.pub.term_destination = la_dest_term;
	s->cinfo.dest = &s->dest.pub;

	s->cinfo.image_width = (JDIMENSION)width;
	s->cinfo.image_height = (JDIMENSION)height;
	s->cinfo.input_components = bytes_per_pixel;
	s->cinfo.in_color_space = bytes_per_pixel == 4 ? JCS_EXT_RGBX : JCS_RGB;
	jpeg_set_defaults(&s->cinfo); // YCbCr, 4:2:0, accurate integer DCT, JFIF marker
	jpeg_set_quality(&s->cinfo, opts->quality, TRUE);
	if (!opts->subsample) {
		s->cinfo.comp_info[0].h_samp_factor = 1;
		s->cinfo.comp_info[0].v_samp_factor = 1;
	}
	s->cinfo.optimize_coding = opts->optimize ? TRUE : FALSE;
	if (opts->progressive) {
		jpeg_simple_progression(&s->cinfo);
	}
	jpeg_start_compress(&s->cinfo, TRUE);
	while (s->cinfo.next_scanline < s->cinfo.image_height) {
		JSAMPROW rows[16];
		JDIMENSION n = s->cinfo.image_height - s->cinfo.next_scanline;
		if (n > 16) {
			n = 16;
		}
		for (JDIMENSION i = 0; i < n; i++) {
			rows[i] = (JSAMPROW)(pix + (size_t)(s->cinfo.next_scanline + i) * stride);
		}
		jpeg_write_scanlines(&s->cinfo, rows, n);
	}
	jpeg_finish_compress(&s->cinfo);
	*out = s->dest.buf;
	*out_size = s->dest.cap - s->dest.pub.free_in_buffer;
	jpeg_destroy_compress(&s->cinfo);
	free(s);
	return LA_JPEG_OK;
}
