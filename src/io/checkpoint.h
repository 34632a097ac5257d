/*
 * checkpoint.h — a program's parameters to and from safetensors files, by
 * tensor name, so any pipeline layout loads any checkpoint and Hugging Face
 * GPT-2 weights load directly.
 */
#ifndef PIPIT_CHECKPOINT_H
#define PIPIT_CHECKPOINT_H

#include "pipit.h"
#include "io/safetensors.h"

/* Writes every param (f32/f64 as declared) atomically; meta: NULL-terminated
 * key, value list stored in __metadata__. */
pipit_status pipit__checkpoint_save(const pipit_program *p, const char *path,
                                    const char *const *meta);
/* Sets every param from the file: a missing tensor, or one whose dtype or
 * shape differs, is an error naming the file, the tensor and both shapes. */
pipit_status pipit__checkpoint_load(pipit_program *p, const pipit__st_file *f, const char *path);

/* Optimizer state beside a checkpoint: "<param>.exp_avg" and
 * "<param>.exp_avg_sq" per param, metadata "opt_steps" (updates taken) and
 * "next_step" (the training step to continue from). Written atomically;
 * loading validates every tensor first (all or nothing). */
pipit_status pipit__optimizer_save(const pipit_program *p, const char *path, int64_t next_step);
pipit_status pipit__optimizer_load(pipit_program *p, const char *path, int64_t *next_step);

#endif
