/*
 * svc-as UID GID GROUPS PROGRAM [ARG...]
 *
 * Runs PROGRAM as UID and GID with the supplementary groups GROUPS (numbers joined by commas), as
 * login and su set them up. The guest agent starts `svc x --user` and `svc sh --user` commands
 * through it when the user is in groups beyond its own: Node's child_process and node-pty (libuv)
 * clear a child's supplementary groups when they set its uid, so a user of `sudo` or `docker` lost
 * them (the durable processes' keeper, svc-keep, sets them itself). PROGRAM is a path the agent has
 * found already; the process keeps its pid through the exec. When a step fails it says which on
 * stderr and exits 126, as a shell does for a program it cannot run. Built static, as svc-keep.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GROUPS 256

static int number(const char *s, unsigned long *out) {
  char *end;
  if (!*s) return -1;
  errno = 0;
  *out = strtoul(s, &end, 10);
  return errno || *end ? -1 : 0;
}

static int fail(const char *what) {
  fprintf(stderr, "svc-as: %s: %s\n", what, strerror(errno));
  return 126;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: svc-as UID GID GROUPS PROGRAM [ARG...]\n");
    return 126;
  }
  unsigned long uid, gid, g;
  if (number(argv[1], &uid) || number(argv[2], &gid)) {
    fprintf(stderr, "svc-as: UID and GID must be numbers\n");
    return 126;
  }
  gid_t groups[MAX_GROUPS];
  size_t n = 0;
  for (char *p = argv[3], *next; p && *p; p = next) {
    next = strchr(p, ',');
    if (next) *next++ = '\0';
    if (n == MAX_GROUPS || number(p, &g)) {
      fprintf(stderr, "svc-as: GROUPS must be at most %d numbers joined by commas\n", MAX_GROUPS);
      return 126;
    }
    groups[n++] = (gid_t)g;
  }
  if (setgroups(n, groups) < 0) return fail("setgroups");
  if (setgid((gid_t)gid) < 0) return fail("setgid");
  if (setuid((uid_t)uid) < 0) return fail("setuid");
  execv(argv[4], argv + 4);
  return fail(argv[4]);
}
