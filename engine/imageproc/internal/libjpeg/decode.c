// JPEG decoding through the system libjpeg(-turbo), with the settings PIL 9.4's decoder
// (libImaging/JpegDecode.c) leaves in place: libjpeg's defaults (accurate integer IDCT,
// fancy upsampling, block smoothing), libjpeg's own colour-space guess from the JFIF and
// Adobe markers, and only the output colour space set: gray, RGB or CMYK.
//
// Errors never leave libjpeg through exit(): error_exit longjmps back here. Warnings
// about a premature end of the data (a truncated file, or an entropy segment cut short by
// a marker) longjmp back too, so that a damaged file is refused instead of decoding to a
// grey tail. Other warnings (extraneous bytes, a bad Huffman code...) are ignored, as PIL
// ignores them.
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "decode.h"

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	int result;          // LA_JPEG_* to report after the longjmp
	int scanlines_done;  // every row has been returned: only the trailer is left
	int max_scans;
	const int *stop;     // when set and non-zero, the caller has given up: stop at the next stripe
} la_error_mgr;

typedef struct {
	struct jpeg_progress_mgr pub;
	la_error_mgr *err;
} la_progress_mgr;

static void la_record(j_common_ptr cinfo, la_jpeg_info *info) {
	const struct jpeg_error_mgr *e = cinfo->err;
	int code = e->msg_code;
	info->msg_code = code;
	info->msg[0] = 0;
	if (code > 0 && code <= e->last_jpeg_message && e->jpeg_message_table[code] != NULL) {
		strncpy(info->msg, e->jpeg_message_table[code], sizeof(info->msg) - 1);
		info->msg[sizeof(info->msg) - 1] = 0;
	}
}

static void la_error_exit(j_common_ptr cinfo) {
	la_error_mgr *err = (la_error_mgr *)cinfo->err;
	err->result = LA_JPEG_ERROR;
	longjmp(err->jump, 1);
}

static void la_emit_message(j_common_ptr cinfo, int level) {
	la_error_mgr *err = (la_error_mgr *)cinfo->err;
	if (level >= 0) {
		return; // trace messages
	}
	err->pub.num_warnings++;
	int code = err->pub.msg_code;
	if (code == JWRN_HIT_MARKER || (code == JWRN_JPEG_EOF && !err->scanlines_done)) {
		// PIL's reader suspends at the end of the data and then raises "image file is
		// truncated"; past the last row it accepts a missing EOI, as PIL does.
		err->result = LA_JPEG_TRUNCATED;
		longjmp(err->jump, 1);
	}
}

static void la_output_message(j_common_ptr cinfo) {
	(void)cinfo; // never print
}

// la_check_stop longjmps out with LA_JPEG_CANCELED once the caller has set its stop flag
// (from another thread, hence the atomic load).
static void la_check_stop(la_error_mgr *err) {
	if (err->stop != NULL && __atomic_load_n(err->stop, __ATOMIC_RELAXED) != 0) {
		err->result = LA_JPEG_CANCELED;
		longjmp(err->jump, 1);
	}
}

static void la_progress(j_common_ptr cinfo) {
	la_progress_mgr *p = (la_progress_mgr *)cinfo->progress;
	j_decompress_ptr d = (j_decompress_ptr)cinfo;
	la_check_stop(p->err); // called per MCU row and per scan, also while a progressive file is read
	if (p->err->max_scans > 0 && d->input_scan_number > p->err->max_scans) {
		p->err->result = LA_JPEG_TOO_MANY_SCANS;
		longjmp(p->err->jump, 1);
	}
}

static void la_fill_info(j_decompress_ptr cinfo, la_jpeg_info *info) {
	info->width = (int)cinfo->image_width;
	info->height = (int)cinfo->image_height;
	info->components = cinfo->num_components;
	info->color_space = (int)cinfo->jpeg_color_space;
	info->progressive = cinfo->progressive_mode ? 1 : 0;
	info->precision = cinfo->data_precision;
}

// la_open sets up cinfo on data and reads the header. Called after setjmp.
static void la_open(j_decompress_ptr cinfo, la_error_mgr *err, const unsigned char *data, size_t size) {
	cinfo->err = jpeg_std_error(&err->pub);
	err->pub.error_exit = la_error_exit;
	err->pub.emit_message = la_emit_message;
	err->pub.output_message = la_output_message;
	jpeg_create_decompress(cinfo);
	jpeg_mem_src(cinfo, data, (unsigned long)size);
	// As PIL does: skip tables-only datastreams until an image header.
	while (jpeg_read_header(cinfo, FALSE) == JPEG_HEADER_TABLES_ONLY) {
	}
}

int la_jpeg_header(const unsigned char *data, size_t size, la_jpeg_info *info) {
	struct jpeg_decompress_struct cinfo;
	la_error_mgr err;
	memset(&cinfo, 0, sizeof(cinfo));
	memset(&err, 0, sizeof(err));
	memset(info, 0, sizeof(*info));
	if (setjmp(err.jump)) {
		la_record((j_common_ptr)&cinfo, info);
		jpeg_destroy_decompress(&cinfo);
		return err.result;
	}
	la_open(&cinfo, &err, data, size);
	la_fill_info(&cinfo, info);
	jpeg_destroy_decompress(&cinfo);
	return LA_JPEG_OK;
}

int la_jpeg_decode(const unsigned char *data, size_t size, unsigned char *out, size_t stride,
                   int want_width, int want_height, int want_components, int max_scans,
                   const int *stop, la_jpeg_info *info) {
	struct jpeg_decompress_struct cinfo;
	la_error_mgr err;
	la_progress_mgr progress;
	memset(&cinfo, 0, sizeof(cinfo));
	memset(&err, 0, sizeof(err));
	memset(&progress, 0, sizeof(progress));
	memset(info, 0, sizeof(*info));
	err.max_scans = max_scans;
	err.stop = stop;
	if (setjmp(err.jump)) {
		la_record((j_common_ptr)&cinfo, info);
		jpeg_destroy_decompress(&cinfo);
		return err.result;
	}
	la_open(&cinfo, &err, data, size);
	la_fill_info(&cinfo, info);
	if (info->width != want_width || info->height != want_height || info->components != want_components) {
		jpeg_destroy_decompress(&cinfo);
		return LA_JPEG_MISMATCH;
	}
	progress.pub.progress_monitor = la_progress;
	progress.err = &err;
	cinfo.progress = &progress.pub;
	switch (want_components) {
	case 1:
		cinfo.out_color_space = JCS_GRAYSCALE;
		break;
	case 3:
		cinfo.out_color_space = JCS_EXT_RGBA; // RGB's values, alpha 255
		break;
	default:
		cinfo.out_color_space = JCS_CMYK;
		break;
	}
	jpeg_start_decompress(&cinfo);
	if ((int)cinfo.output_width != want_width || (int)cinfo.output_height != want_height) {
		jpeg_destroy_decompress(&cinfo);
		return LA_JPEG_MISMATCH;
	}
	while (cinfo.output_scanline < cinfo.output_height) {
		la_check_stop(&err);
		JSAMPROW rows[16];
		JDIMENSION n = cinfo.output_height - cinfo.output_scanline;
		if (n > 16) {
			n = 16;
		}
		for (JDIMENSION i = 0; i < n; i++) {
			rows[i] = out + (size_t)(cinfo.output_scanline + i) * stride;
		}
		if (jpeg_read_scanlines(&cinfo, rows, n) == 0) {
			// The memory source never suspends; guard against looping anyway.
			err.result = LA_JPEG_TRUNCATED;
			longjmp(err.jump, 1);
		}
	}
	err.scanlines_done = 1;
	jpeg_finish_decompress(&cinfo);
	jpeg_destroy_decompress(&cinfo);
	return LA_JPEG_OK;
}
