/*
 * jpegenc: writes the JPEG layouts PIL's encoder cannot, for the parity goldens
 * (gen.py builds and runs it): any sampling factors (4:4:0, 4:1:1, 4:1:0...), restart
 * markers, RGB without colour transform, YCCK, CMYK without an Adobe marker,
 * arithmetic coding, progressive variants.
 *
 *   jpegenc W H IN SPACE QUALITY SAMPLING [progressive] [restart=ROWS] [arith] [noadobe]
 *
 * reads W*H pixels of IN ("gray", "rgb" or "cmyk": 1, 3 or 4 bytes each) from standard
 * input and writes the JPEG to standard output. SPACE is the stored colour space ("gray",
 * "ycbcr", "rgb", "cmyk" or "ycck"); SAMPLING is HxV per component, e.g. 1x2,1x1,1x1.
 *
 *   cc -O2 -o jpegenc jpegenc.c -ljpeg
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static void die(const char *msg) {
	fprintf(stderr, "jpegenc: %s\n", msg);
	exit(2);
}

int main(int argc, char **argv) {
	if (argc < 7) {
		die("usage: jpegenc W H IN SPACE QUALITY SAMPLING [progressive] [restart=ROWS] [arith] [noadobe]");
	}
	int w = atoi(argv[1]), h = atoi(argv[2]), quality = atoi(argv[5]);
	const char *in = argv[3], *space = argv[4], *sampling = argv[6];
	int in_comps = strcmp(in, "gray") == 0 ? 1 : strcmp(in, "rgb") == 0 ? 3 : strcmp(in, "cmyk") == 0 ? 4 : 0;
	if (w <= 0 || h <= 0 || in_comps == 0) {
		die("bad size or input layout");
	}
	size_t row = (size_t)w * in_comps;
	unsigned char *pix = malloc(row * h);
	if (pix == NULL || fread(pix, 1, row * h, stdin) != row * h) {
		die("short input");
	}

	struct jpeg_compress_struct c;
	struct jpeg_error_mgr err;
	c.err = jpeg_std_error(&err);
	jpeg_create_compress(&c);
	jpeg_stdio_dest(&c, stdout);
	c.image_width = w;
	c.image_height = h;
	c.input_components = in_comps;
	c.in_color_space = in_comps == 1 ? JCS_GRAYSCALE : in_comps == 3 ? JCS_RGB : JCS_CMYK;
	jpeg_set_defaults(&c);
	J_COLOR_SPACE js = JCS_UNKNOWN;
	if (strcmp(space, "gray") == 0) js = JCS_GRAYSCALE;
	if (strcmp(space, "ycbcr") == 0) js = JCS_YCbCr;
	if (strcmp(space, "rgb") == 0) js = JCS_RGB;
	if (strcmp(space, "cmyk") == 0) js = JCS_CMYK;
	if (strcmp(space, "ycck") == 0) js = JCS_YCCK;
	if (js == JCS_UNKNOWN) {
		die("bad colour space");
	}
	jpeg_set_colorspace(&c, js);
	jpeg_set_quality(&c, quality, TRUE);
	const char *s = sampling;
	for (int ci = 0; ci < c.num_components; ci++) {
		int hs, vs, n;
		if (sscanf(s, "%dx%d%n", &hs, &vs, &n) != 2) {
			die("bad sampling factors");
		}
		c.comp_info[ci].h_samp_factor = hs;
		c.comp_info[ci].v_samp_factor = vs;
		s += n;
		if (*s == ',') {
			s++;
		}
	}
	for (int i = 7; i < argc; i++) {
		if (strcmp(argv[i], "progressive") == 0) {
			jpeg_simple_progression(&c);
		} else if (strncmp(argv[i], "restart=", 8) == 0) {
			c.restart_in_rows = atoi(argv[i] + 8);
		} else if (strcmp(argv[i], "arith") == 0) {
			c.arith_code = TRUE;
		} else if (strcmp(argv[i], "noadobe") == 0) {
			c.write_Adobe_marker = FALSE;
		} else {
			die("unknown option");
		}
	}
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		JSAMPROW r = pix + row * c.next_scanline;
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(pix);
	return 0;
}
