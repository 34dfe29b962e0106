/* fashion_mnist.h -- reads MNIST-format (idx) files, gzip'd or not, for the examples.

   A directory holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
   t10k-labels-idx1-ubyte, each optionally with ".gz" (zlib's gzread reads both forms). Debian's
   dataset-fashion-mnist package installs them in /usr/share/datasets/fashion-mnist. Images are
   returned as floats with the tutorial's transforms: x / 255, then (x - 0.1307) / 0.3081. */
#ifndef FASHION_MNIST_H
#define FASHION_MNIST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define MNIST_PIXELS 784

typedef struct mnist_set {
  int n;          /* images */
  float *images;  /* n x 784, normalised */
  int32_t *labels;
} mnist_set;

static uint32_t mnist__be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Opens dir/name or dir/name.gz. */
static gzFile mnist__open(const char *dir, const char *name, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s.gz", dir, name);
  gzFile f = gzopen(path, "rb");
  if (f) return f;
  snprintf(path, cap, "%s/%s", dir, name);
  return gzopen(path, "rb");
}

/* Reads n bytes or fails. */
static int mnist__read(gzFile f, void *buf, size_t n) {
  unsigned char *p = (unsigned char *)buf;
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
    int got = gzread(f, p, chunk);
    if (got <= 0) return -1;
    p += got, n -= (size_t)got;
  }
  return 0;
}

/* Leaves *s empty, so freeing it again is harmless. */
static void mnist_free(mnist_set *s) {
  free(s->images);
  free(s->labels);
  s->images = NULL, s->labels = NULL, s->n = 0;
}

/* mnist_load's body: may leave buffers in *out when it fails. */
static int mnist__load(const char *dir, const char *split, mnist_set *out, char *err, size_t errcap) {
  char name[64], path[1024];
  unsigned char hdr[16];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
  gzFile fi = mnist__open(dir, name, path, sizeof path);
  if (!fi) {
    snprintf(err, errcap,
             "cannot open %.300s/%s[.gz]: install Debian's dataset-fashion-mnist package (it provides %s) or point "
             "DATA_PATH at an MNIST-format directory",
             dir, name, MNIST_DEFAULT_DIR);
    return -1;
  }
  if (mnist__read(fi, hdr, 16) || mnist__be32(hdr) != 2051 || mnist__be32(hdr + 8) != 28 || mnist__be32(hdr + 12) != 28) {
    snprintf(err, errcap, "%.400s: not an idx3 file of 28x28 images", path);
    gzclose(fi);
    return -1;
  }
  int n = (int)mnist__be32(hdr + 4);
  unsigned char *pix = (unsigned char *)malloc((size_t)n * MNIST_PIXELS);
  out->images = (float *)malloc(sizeof(float) * (size_t)n * MNIST_PIXELS);
  out->labels = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
  if (!pix || !out->images || !out->labels) {
    snprintf(err, errcap, "out of memory reading %.400s", path);
    free(pix);
    gzclose(fi);
    return -1;
  }
  if (mnist__read(fi, pix, (size_t)n * MNIST_PIXELS)) {
    snprintf(err, errcap, "%.400s: truncated (expected %d images)", path, n);
    free(pix);
    gzclose(fi);
    return -1;
  }
  gzclose(fi);
  for (size_t i = 0; i < (size_t)n * MNIST_PIXELS; i++)
    out->images[i] = ((float)pix[i] / 255.0f - 0.1307f) / 0.3081f;
  free(pix);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split);
  gzFile fl = mnist__open(dir, name, path, sizeof path);
  unsigned char lhdr[8];
  if (!fl || mnist__read(fl, lhdr, 8) || mnist__be32(lhdr) != 2049 || (int)mnist__be32(lhdr + 4) != n) {
    snprintf(err, errcap, "%.300s/%s[.gz]: missing, or not an idx1 file of %d labels", dir, name, n);
    if (fl) gzclose(fl);
    return -1;
  }
  unsigned char *lab = (unsigned char *)malloc((size_t)n);
  if (!lab || mnist__read(fl, lab, (size_t)n)) {
    snprintf(err, errcap, "%.400s: truncated", path);
    free(lab);
    gzclose(fl);
    return -1;
  }
  gzclose(fl);
  for (int i = 0; i < n; i++) {
    if (lab[i] > 9) {
      snprintf(err, errcap, "%.400s: label %d of image %d is not 0..9", path, lab[i], i);
      free(lab);
      return -1;
    }
    out->labels[i] = lab[i];
  }
  free(lab);
  out->n = n;
  return 0;
}

/* Loads one split ("train" or "t10k"). Returns 0, or -1 with a message in err and *out empty. */
static int mnist_load(const char *dir, const char *split, mnist_set *out, char *err, size_t errcap) {
  memset(out, 0, sizeof *out);
  if (mnist__load(dir, split, out, err, errcap) == 0) return 0;
  mnist_free(out);
  return -1;
}

#endif
