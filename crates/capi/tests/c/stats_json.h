/* One number from the flat JSON object of torch's memory_stats that the library writes
 * ({"allocated_bytes.all.current":123,...}), for the C test programs; -1 if the key is absent
 * or the JSON is NULL. */
#ifndef CACHALOT_TESTS_STATS_JSON_H
#define CACHALOT_TESTS_STATS_JSON_H

#include <stdio.h>
#include <string.h>

static long long stat_of(const char *json, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *at = json ? strstr(json, pat) : NULL;
  long long v = -1;
  if (at) sscanf(at + strlen(pat), "%lld", &v);
  return v;
}

#endif
