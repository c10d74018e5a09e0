// JPEG decoding through the system libjpeg(-turbo), with the settings PIL uses.
#ifndef LA_LIBJPEG_DECODE_H
#define LA_LIBJPEG_DECODE_H

#include <stddef.h>

// How a call ended.
enum {
	LA_JPEG_OK = 0,
	LA_JPEG_ERROR = 1,     // libjpeg's error_exit: msg_code names the error
	LA_JPEG_TRUNCATED = 2, // a premature end of data (msg_code: the libjpeg warning)
	LA_JPEG_TOO_MANY_SCANS = 3,
	LA_JPEG_MISMATCH = 4,  // the header differs from the one the caller sized the buffer for
	LA_JPEG_CANCELED = 5,  // the caller set *stop
};

// la_jpeg_info is what a call reports: the header, and on failure the libjpeg message
// code and its template (the format string, never formatted with values from the file).
typedef struct {
	int width, height;
	int components;      // num_components
	int color_space;     // jpeg_color_space as libjpeg reads the file (J_COLOR_SPACE)
	int progressive;
	int precision;       // data_precision
	int msg_code;
	char msg[200];
} la_jpeg_info;

// la_jpeg_header reads the header only.
int la_jpeg_header(const unsigned char *data, size_t size, la_jpeg_info *info);

// la_jpeg_decode decodes the whole image into out (height rows of stride bytes): gray
// for 1 component, RGBA with alpha 255 for 3, CMYK as libjpeg hands it over for 4.
// want_width/want_height/want_components must equal what the header says. stop, when
// not NULL, is read (atomically) between stripes of rows and in libjpeg's progress
// callback: once it is non-zero the call ends with LA_JPEG_CANCELED.
int la_jpeg_decode(const unsigned char *data, size_t size, unsigned char *out, size_t stride,
                   int want_width, int want_height, int want_components, int max_scans,
                   const int *stop, la_jpeg_info *info);

#endif
