/* datasets.h -- what feeds a network's inputs in sk-sim, by the network's "dataset" name:

     fashion-mnist  Debian's Fashion-MNIST (examples/fashion_mnist.h): the network's float
                    input gets the images (normalised as the tutorial does), its other input
                    the labels (an integer tensor: the class; a float tensor: the class as a
                    number, for regression networks such as the recursive-programming
                    tutorial's).
                    Batches are taken in order, without shuffling; the last partial batch of
                    the test set is dropped.
     sequences      synthetic token sequences from a seed: the input "tokens" [B, T] holds
                    tokens uniform in [0, V), the integer input "targets" the same sequences
                    reversed (flattened to its shape), V the class count of the network's
                    logits. Reversing needs every position to see every other, which is what
                    attention learns; a small transformer's loss falls steadily on it. 64
                    batches make an epoch; the test set is 16 batches from another seed.

   A batch is the whole global batch: the network's batch size is global. A network without a
   "dataset" (kind -1 here) is fed by its data sources alone (data_sources.h), which also
   override the dataset input by input. */
#ifndef SK_TOOLS_DATASETS_H
#define SK_TOOLS_DATASETS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/fashion_mnist.h"
#include "sk_graph.h"

#define SEQ_TRAIN_BATCHES 64
#define SEQ_TEST_BATCHES 16

typedef struct dataset {
  int kind; /* 0: fashion-mnist, 1: sequences, -1: none (the data sources feed every input) */
  int x, y; /* the input tensors fed: images / tokens, labels / targets */
  int64_t batch, per_sample_x, per_sample_y;
  long train_batches, test_batches;
  mnist_set train, test;
  int64_t vocab, seq_len;
  uint64_t seed;
} dataset;

/* Finds the float (or token) input and the label input of g. */
static int dataset_inputs(const sk_graph *g, dataset *d, char *err, size_t cap) {
  d->x = d->y = -1;
  for (int i = 0; i < g->ntensors; i++) {
    const sk_graph_tensor *t = &g->tensors[i];
    if (t->role != SK_TENSOR_INPUT) continue;
    bool is_x = d->kind == 1 ? strcmp(t->name, "tokens") == 0 : (t->dtype == SK_F32 || t->dtype == SK_F64);
    if (is_x && d->x < 0) d->x = i;
    else if (d->y < 0) d->y = i;
  }
  if (d->x < 0 || d->y < 0) {
    snprintf(err, cap, "dataset '%s' needs two inputs (%s)", g->dataset,
             d->kind ? "tokens [B, T] and integer targets" : "float images [B, ...] and labels [B]");
    return -1;
  }
  d->batch = g->tensors[d->x].shape[0];
  d->per_sample_x = sk_graph_numel(g, d->x) / d->batch, d->per_sample_y = sk_graph_numel(g, d->y) / d->batch;
  return 0;
}

static int dataset_open(const sk_graph *g, const char *mnist_dir, uint64_t seed, dataset *d, char *err, size_t cap) {
  memset(d, 0, sizeof *d);
  if (!g->dataset[0]) return d->kind = -1, 0;
  if (!strcmp(g->dataset, "fashion-mnist")) d->kind = 0;
  else if (!strcmp(g->dataset, "sequences")) d->kind = 1;
  else return snprintf(err, cap, "unknown dataset '%s' (fashion-mnist or sequences)", g->dataset), -1;
  if (dataset_inputs(g, d, err, cap)) return -1;
  if (d->kind == 1) {
    const sk_graph_tensor *x = &g->tensors[d->x];
    if (g->logits < 0 || x->ndims != 2 || d->per_sample_y != x->shape[1])
      return snprintf(err, cap, "sequences: needs tokens [B, T], targets of B*T elements and logits set"), -1;
    d->seq_len = x->shape[1], d->vocab = g->tensors[g->logits].shape[g->tensors[g->logits].ndims - 1];
    d->seed = seed, d->train_batches = SEQ_TRAIN_BATCHES, d->test_batches = SEQ_TEST_BATCHES;
    return 0;
  }
  if (d->per_sample_x != MNIST_PIXELS || d->per_sample_y != 1)
    return snprintf(err, cap, "fashion-mnist: needs images of 784 values and one label per sample"), -1;
  if (mnist_load(mnist_dir, "train", &d->train, err, cap) || mnist_load(mnist_dir, "t10k", &d->test, err, cap))
    return -1;
  d->train_batches = d->train.n / d->batch, d->test_batches = d->test.n / d->batch;
  return 0;
}

static void dataset_close(dataset *d) { mnist_free(&d->train), mnist_free(&d->test); }

static uint64_t dataset__mix(uint64_t z) { /* splitmix64: token i of batch b from one seed */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Batch b of the train (test = 0) or test set into x (floats, or int32 tokens) and y (int32
   labels / targets, or floats for a float label input). */
static void dataset_batch(const dataset *d, bool test, long b, void *x, void *y, bool y_float) {
  if (d->kind == 1) {
    int32_t *tok = (int32_t *)x;
    /* train and test draw from streams far apart: test's starts 2^40 tokens on */
    uint64_t base = dataset__mix(d->seed) + (test ? (uint64_t)1 << 40 : 0) + (uint64_t)b * (uint64_t)(d->batch * d->seq_len);
    for (int64_t s = 0; s < d->batch; s++)
      for (int64_t t = 0; t < d->seq_len; t++) {
        int32_t v = (int32_t)(dataset__mix(base + (uint64_t)(s * d->seq_len + t)) % (uint64_t)d->vocab);
        tok[s * d->seq_len + t] = v;
        ((int32_t *)y)[s * d->seq_len + (d->seq_len - 1 - t)] = v;
      }
    return;
  }
  const mnist_set *m = test ? &d->test : &d->train;
  size_t row0 = (size_t)b * (size_t)d->batch;
  memcpy(x, m->images + row0 * MNIST_PIXELS, sizeof(float) * (size_t)d->batch * MNIST_PIXELS);
  for (int64_t i = 0; i < d->batch; i++) {
    if (y_float) ((float *)y)[i] = (float)m->labels[row0 + (size_t)i];
    else ((int32_t *)y)[i] = m->labels[row0 + (size_t)i];
  }
}

#endif
