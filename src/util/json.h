/*
 * json.h — reading a JSON document a user wrote (config.json,
 * tokenizer.json, vocab.json, a safetensors header): cJSON parses, and
 * this adds the two checks cJSON does not make, so that nothing in the file
 * is silently ignored: nothing but whitespace may follow the value, and no
 * object may hold a key twice (cJSON keeps both and finds the first: the
 * second would never be read).
 */
#ifndef PIPIT_JSON_H
#define PIPIT_JSON_H

#include <stddef.h>

#include "pipit.h"

struct cJSON;

/* Parses text[0, len) (no NUL needed) into *out (free with cJSON_Delete).
 * FORMAT, the message starting with `what` ("config 'x.json'"): not JSON
 * (the byte near the error), text after the value (its byte), or a key
 * twice in one object (its path, "rope_parameters.factor"); NOMEM. *out is
 * NULL on failure. */
pipit_status pipit__json_parse(const char *text, size_t len, const char *what, struct cJSON **out);

/* The first key that appears twice in one object of the document under o,
 * as a path "a.b[3].c" into buf (n bytes); NULL when every key is unique.
 * O(k log k) per object of k keys, so a 50,000-token vocabulary costs
 * milliseconds. *nomem is set when an allocation failed (then NULL). */
const char *pipit__json_dup_key_path(const struct cJSON *o, char *buf, size_t n, int *nomem);

#endif
