/*
 * svc-watch: a file watch for the svc agent (docs/processes.md), run under svc-keep so that its
 * events are journaled like any kept process's output.
 *
 *   svc-watch [--recursive] PATH
 *
 * Prints one JSON object a line for what inotify reports under PATH:
 *   {"type":"create|write|remove|rename|chmod","path":"...","to":"...","entry":{...}}
 * `to` only for a rename (a move inside the watched tree: IN_MOVED_FROM and IN_MOVED_TO paired by
 * their cookie; a move out of the tree is a remove, into it a create). `entry` is what lstat says
 * of the path (or of `to`) when the event is read: {"type":"file|directory|symlink|other",
 * "size":N,"mode":"0644"}; absent when the path is gone. {"type":"overflow"} when the kernel
 * dropped events. With --recursive, directories created later are watched as they appear, and
 * what was made in them before their watch was in place is reported as created. Paths are written
 * as bytes; a byte that is not printable ASCII is escaped as \u00XX. Exits 2 when PATH cannot be
 * watched, saying why on stderr.
 *
 * Its first line is {"type":"ready"}, written once every watch is in place (with --recursive,
 * on each directory of the tree): the agent says a watch has begun only then, so that nothing
 * done after that is missed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a move out waits for its pair (a move inside the tree) before it is said as a remove. */
#define PAIR_WAIT_MS 200
#define MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

struct wd_path {
  int wd;
  char *path;
};

static struct wd_path *wds;
static size_t nwds, capwds;
static int fd_in, recursive;

static const char *path_of(int wd) {
  for (size_t i = 0; i < nwds; i++)
    if (wds[i].wd == wd) return wds[i].path;
  return NULL;
}

static void forget(int wd) {
  for (size_t i = 0; i < nwds; i++)
    if (wds[i].wd == wd) {
      free(wds[i].path);
      wds[i] = wds[--nwds];
      return;
    }
}

static void put_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

static void put_entry(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return;
  const char *t = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink" : "other";
  printf(",\"entry\":{\"type\":\"%s\",\"size\":%lld,\"mode\":\"0%03o\"}", t, (long long)st.st_size, st.st_mode & 07777);
}

static void emit(const char *type, const char *path, const char *to) {
  printf("{\"type\":\"%s\",\"path\":", type);
  put_string(path);
  if (to) {
    printf(",\"to\":");
    put_string(to);
  }
  if (strcmp(type, "remove") != 0) put_entry(to ? to : path);
  printf("}\n");
}

static void add_watch(const char *path, int report);

/*
 * Paths a scan of a new directory reported as created: its own IN_CREATE may follow (when the
 * watch was in place before the entry came), and is then not reported twice.
 */
#define SCANNED 256
static char *scanned[SCANNED];
static int scanned_next;

static void note_scanned(const char *path) {
  free(scanned[scanned_next]);
  scanned[scanned_next] = strdup(path);
  scanned_next = (scanned_next + 1) % SCANNED;
}

static int take_scanned(const char *path) {
  for (int i = 0; i < SCANNED; i++)
    if (scanned[i] && !strcmp(scanned[i], path)) {
      free(scanned[i]);
      scanned[i] = NULL;
      return 1;
    }
  return 0;
}

/* Watches a directory and, with report, says what is already in it (made before the watch). */
static void add_tree(const char *path, int report) {
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) continue;
    if (report) {
      emit("create", child, NULL);
      note_scanned(child);
    }
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) add_watch(child, report);
  }
  closedir(d);
}

static void remember(int wd, const char *path) {
  if (path_of(wd)) return;
  if (nwds == capwds) {
    capwds = capwds ? capwds * 2 : 64;
    wds = realloc(wds, capwds * sizeof *wds);
  }
  wds[nwds++] = (struct wd_path){wd, strdup(path)};
}

static void add_watch(const char *path, int report) {
  int wd = inotify_add_watch(fd_in, path, MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
  if (wd < 0) return;
  remember(wd, path);
  if (recursive) add_tree(path, report);
}

int main(int argc, char **argv) {
  const char *root = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--recursive")) recursive = 1;
    else root = argv[i];
  }
  if (!root) {
    fprintf(stderr, "usage: svc-watch [--recursive] PATH\n");
    return 2;
  }
  fd_in = inotify_init1(IN_CLOEXEC);
  if (fd_in < 0) {
    perror("inotify_init1");
    return 2;
  }
  struct stat st;
  if (stat(root, &st) < 0) {
    fprintf(stderr, "%s: %s\n", root, strerror(errno));
    return 2;
  }
  int wd = inotify_add_watch(fd_in, root, MASK);
  if (wd < 0) {
    fprintf(stderr, "%s: cannot watch: %s\n", root, strerror(errno));
    return 2;
  }
  remember(wd, root);
  if (S_ISDIR(st.st_mode) && recursive) add_tree(root, 0);
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  printf("{\"type\":\"ready\"}\n");
  fflush(stdout);
  char buf[1 << 16] __attribute__((aligned(__alignof__(struct inotify_event))));
  /* a move out, held until the next read shows whether its pair came */
  char from[PATH_MAX] = "";
  uint32_t from_cookie = 0;
  for (;;) {
    ssize_t n = read(fd_in, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    for (char *p = buf; p < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        printf("{\"type\":\"overflow\"}\n");
        continue;
      }
      const char *dir = path_of(ev->wd);
      if (!dir) continue;
      char path[PATH_MAX];
      if (ev->len) snprintf(path, sizeof path, "%s/%s", dir, ev->name);
      else snprintf(path, sizeof path, "%s", dir);
      if (from_cookie && !((ev->mask & IN_MOVED_TO) && ev->cookie == from_cookie)) {
        emit("remove", from, NULL);
        from_cookie = 0;
      }
      if (ev->mask & IN_IGNORED) {
        forget(ev->wd);
        if (nwds == 0) goto out; /* the watched path itself is gone */
        continue;
      }
      if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (!ev->len && strcmp(dir, root) == 0) emit("remove", root, NULL);
        continue;
      }
      if (ev->mask & IN_MOVED_FROM) {
        snprintf(from, sizeof from, "%s", path);
        from_cookie = ev->cookie;
      } else if (ev->mask & IN_MOVED_TO) {
        if (from_cookie && ev->cookie == from_cookie) {
          emit("rename", from, path);
          from_cookie = 0;
        } else {
          emit("create", path, NULL);
        }
        if (recursive && (ev->mask & IN_ISDIR)) add_watch(path, 1);
      } else if (ev->mask & IN_CREATE) {
        if (!take_scanned(path)) emit("create", path, NULL);
        if (recursive && (ev->mask & IN_ISDIR)) add_watch(path, 1);
      } else if (ev->mask & IN_DELETE) {
        emit("remove", path, NULL);
      } else if (ev->mask & IN_MODIFY) {
        emit("write", path, NULL);
      } else if (ev->mask & IN_ATTRIB) {
        emit("chmod", path, NULL);
      }
    }
    if (from_cookie) {
      /*
       * The pair of a move is queued by the same rename, nearly always in the same read; the
       * renaming task can be put off between the two (the kernel may sleep allocating the
       * second), so its pair gets a poll of its own. 10 ms was too short for a guest on a busy
       * host (a clean-clone CI run saw a rename said as a remove and a create, 2026-12-02); a
       * move out of the tree is said up to PAIR_WAIT_MS late.
       */
      struct pollfd pf = {.fd = fd_in, .events = POLLIN};
      int r;
      do r = poll(&pf, 1, PAIR_WAIT_MS);
      while (r < 0 && errno == EINTR);
      if (r <= 0) {
        emit("remove", from, NULL);
        from_cookie = 0;
      }
    }
    fflush(stdout);
  }
out:
  if (from_cookie) emit("remove", from, NULL);
  fflush(stdout);
  return 0;
}
