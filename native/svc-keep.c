/*
 * svc-keep: keeps one durable process for the svc agent (docs/processes.md).
 *
 *   svc-keep DIR CAP SEGMENT [--pty COLS ROWS] [--stdin] [--cwd PATH] [--uid N] [--gid N]
 *            [--groups N,N,...] [--restart always|on-failure [--max-restarts N]] -- CMD [ARG...]
 *
 * It starts CMD in a process group of its own (a session of its own with a terminal for --pty)
 * and writes what CMD prints into journal files in DIR, so that the output outlives whoever
 * asked for it: the agent may be killed and started again, and the new one reads on from the
 * files. Each stream (stdout and stderr, or pty) is kept as segment files named
 * `<stream>.<first byte's offset, 20 digits>` of at most SEGMENT bytes; once a stream holds more
 * than CAP bytes its oldest segments are removed (a reader sees the first kept offset, and a gap
 * where a write failed, and says so). On a full disk the stream's oldest segments make room for
 * its newest bytes as they do at CAP; what still does not fit is lost, counted in the offsets,
 * and an empty segment at the stream's end says where the gap ends as soon as the bytes are lost.
 * When CMD has ended and its output has drained (or 300 ms after it ended, when something it
 * started still holds the pipes), `exit.json` appears: {"code":N} or {"signal":N}, with
 * "ended_at_ms". Its page is reserved when the keeper starts (exit.json.tmp), so a disk filled
 * meanwhile does not keep it from being written; where none could be reserved, the oldest output
 * makes room for it on a full disk.
 *
 * DIR/ctl (a FIFO) takes lines "resize COLS ROWS" and "eof"; with --stdin, DIR/stdin (a FIFO)
 * takes bytes for CMD's input. Both are held open for reading and writing here, so writers may
 * come and go. Signals go to CMD's process group straight from the agent (kill -PGID).
 *
 * With --restart, CMD is started again when it ends (on-failure: when it ended otherwise than with
 * exit code 0), at most N times with --max-restarts, after 100 ms doubled at each restart up to
 * 30 s (back to 100 ms after a run of 10 s or more). What the run left in its process group is
 * killed first. Its output goes on in the same journal, its offsets continuing. Each run's pid is
 * in DIR/run.json ({"pid","restarts","last":{"code"|"signal","ended_at_ms"}}), and signals go
 * through ctl ("signal N": to the current run's group), so one never reaches a run that ended. A
 * "stop" line, or a signal of INT, QUIT, KILL or TERM, ends the restarts: exit.json then says how
 * the last run ended. --restart takes no --pty or --stdin. SIGTERM to the keeper itself (a guest
 * that shuts down asks every process) ends the restarts too; the keeper ends once CMD has.
 *
 * On start it prints "ok PID KEEPER\n" (CMD's pid, which is also its process group, and its own)
 * or "error MESSAGE\n" on standard output and closes it. Built static (no NSS: supplementary groups come as numbers),
 * so it runs in any guest the agent runs in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROUPS 64
#define DRAIN_MS 300

struct journal {
  const char *name;
  int fd;           /* the segment being written, -1 before the first byte */
  uint64_t seg;     /* its first byte's offset */
  uint64_t end;     /* the stream's length so far */
  uint64_t *starts; /* kept segments, oldest first */
  int n, max;
};

static const char *dir;
static uint64_t cap, segsize;
static int sigpipe_fds[2];
/* What each run of CMD is started with. */
static char **cmd;
static const char *cwd;
static long uid = -1, gid = -1;
static gid_t groups[MAX_GROUPS];
static int ngroups = -1;

enum restart_policy { RESTART_NO, RESTART_ALWAYS, RESTART_ON_FAILURE };
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 30000
#define BACKOFF_RESET_MS 10000

static void die_start(const char *what) {
  printf("error %s: %s\n", what, strerror(errno));
  exit(1);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void seg_path(char *buf, size_t len, const char *name, uint64_t start) {
  snprintf(buf, len, "%s/%s.%020llu", dir, name, (unsigned long long)start);
}

/* Removes the stream's oldest kept segment: at its cap, or for room on a full disk. */
static void drop_oldest(struct journal *j) {
  char path[PATH_MAX];
  seg_path(path, sizeof path, j->name, j->starts[0]);
  unlink(path);
  memmove(j->starts, j->starts + 1, sizeof(uint64_t) * (size_t)(j->n - 1));
  j->n--;
}

static void open_segment(struct journal *j) {
  char path[PATH_MAX];
  if (j->fd >= 0) close(j->fd);
  seg_path(path, sizeof path, j->name, j->end);
  j->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  j->seg = j->end;
  if (j->fd < 0) return;
  if (j->n == j->max) drop_oldest(j); /* the stream holds at most max segments, CAP bytes */
  j->starts[j->n++] = j->end;
}

/*
 * After a failed write: the segment being written is removed when it is still empty (the disk was
 * full with nothing of this stream's to give back, or it failed otherwise), for the new one the
 * caller opens after the lost bytes. So a disk that stays full leaves one empty segment that says
 * where the stream is, not one per failed write; those took the stream's segment slots one by one.
 * A new file, not a rename: a follower that holds the empty one open would read what is written
 * next as if it were at the old offset.
 */
static void drop_if_empty(struct journal *j) {
  if (j->fd < 0 || j->n == 0 || j->starts[j->n - 1] != j->seg || lseek(j->fd, 0, SEEK_END) != 0) return;
  char path[PATH_MAX];
  seg_path(path, sizeof path, j->name, j->seg);
  unlink(path);
  j->n--;
}

static void journal_write(struct journal *j, const char *buf, size_t len) {
  while (len > 0) {
    if (j->fd < 0 || j->end - j->seg >= segsize) open_segment(j);
    size_t room = (size_t)(segsize - (j->end - j->seg));
    size_t part = len < room ? len : room;
    ssize_t w = j->fd >= 0 ? write(j->fd, buf, part) : -1;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == ENOSPC || errno == EDQUOT) && j->fd >= 0 && j->n > 1) {
      /* a full disk: the stream's oldest bytes make room for its newest, as at its cap */
      drop_oldest(j);
      continue;
    }
    if (w <= 0) {
      /*
       * Disk full or gone: these bytes are lost; the offsets go on, and an empty segment at the
       * stream's end says the gap at once, not at the stream's next byte (which may be long in
       * coming, or never: a process that ends next would have its last bytes lost unsaid).
       */
      j->end += part;
      drop_if_empty(j);
      open_segment(j); /* one that cannot be opened is tried again at the next write */
    } else {
      j->end += (uint64_t)w;
      part = (size_t)w;
    }
    buf += part;
    len -= part;
  }
}

/*
 * SIGCHLD (a run ended) and SIGTERM to the keeper itself (a guest shutting down asks every process:
 * no next run; it ends once CMD has), as a byte for the loop's poll: 'c' or 't'.
 */
static void on_signal(int sig) {
  int e = errno;
  ssize_t r = write(sigpipe_fds[1], sig == SIGTERM ? "t" : "c", 1);
  (void)r;
  errno = e;
}

/*
 * exit.json's page, taken when the keeper starts (reserve_exit): the status is written into blocks
 * the file already has, so a disk filled while CMD ran cannot keep how it ended from being said.
 * -1 where the file system cannot reserve (no fallocate) or was full already.
 */
static int exit_fd = -1;

static void exit_paths(char *tmp, char *path) {
  snprintf(tmp, PATH_MAX, "%s/exit.json.tmp", dir);
  snprintf(path, PATH_MAX, "%s/exit.json", dir);
}

static void reserve_exit(void) {
  char tmp[PATH_MAX], path[PATH_MAX];
  exit_paths(tmp, path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (posix_fallocate(fd, 0, 4096) != 0) {
    close(fd);
    unlink(tmp);
    return;
  }
  exit_fd = fd;
}

/* The status into the reserved page; 0 when it is in place. */
static int write_reserved(const char *body, int n, const char *tmp, const char *path) {
  int fd = exit_fd;
  exit_fd = -1;
  int ok = pwrite(fd, body, (size_t)n, 0) == n && ftruncate(fd, n) == 0 && fsync(fd) == 0;
  close(fd);
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/*
 * Writes exit.json whole or not at all: into the page reserved at the start, or, where there is
 * none, as a new file. On a full disk the streams' oldest segments then make room for it, one at
 * a time: how the process ended outranks its oldest output (without it a reader is told only that
 * the process was lost).
 */
static void write_exit(int status, struct journal *js, int njs) {
  char tmp[PATH_MAX], path[PATH_MAX], body[128];
  exit_paths(tmp, path);
  int n;
  if (WIFSIGNALED(status))
    n = snprintf(body, sizeof body, "{\"signal\":%d,\"ended_at_ms\":%lld}\n", WTERMSIG(status), (long long)now_ms());
  else
    n = snprintf(body, sizeof body, "{\"code\":%d,\"ended_at_ms\":%lld}\n", WEXITSTATUS(status), (long long)now_ms());
  if (exit_fd >= 0 && write_reserved(body, n, tmp, path) == 0) return;
  for (;;) {
    int err = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      err = errno;
    } else {
      ssize_t w = write(fd, body, (size_t)n);
      if (w != n) err = w < 0 ? errno : ENOSPC;
      else if (fsync(fd) != 0) err = errno;
      close(fd);
      if (!err && rename(tmp, path) == 0) return;
      if (!err) err = errno;
    }
    unlink(tmp);
    if (err != ENOSPC && err != EDQUOT) return;
    int k = 0;
    while (k < njs && js[k].n == 0) k++;
    if (k == njs) return; /* nothing of its own left to give back */
    if (js[k].fd >= 0 && js[k].starts[0] == js[k].seg) {
      close(js[k].fd);
      js[k].fd = -1;
    }
    drop_oldest(&js[k]);
  }
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int open_fifo(const char *name) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
  if (mkfifo(path, 0600) < 0) die_start("mkfifo");
  int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die_start("open fifo");
  return fd;
}


/*
 * Forks CMD with its input, output and error on in_fd, out_fd and err_fd (or, with `slave`, on a
 * terminal of its own), in a process group of its own. Its pid, or -1 with what failed in e: e[0]
 * the step (1 cwd, 2 group, 3 user, 4 exec), e[1] its errno.
 */
static pid_t fork_cmd(int in_fd, int out_fd, int err_fd, int slave, int e[2]) {
  int execpipe[2];
  e[0] = 0, e[1] = 0;
  if (pipe2(execpipe, O_CLOEXEC) < 0) {
    e[0] = 4, e[1] = errno;
    return -1;
  }
  pid_t child = fork();
  if (child < 0) {
    e[0] = 4, e[1] = errno;
    close(execpipe[0]);
    close(execpipe[1]);
    return -1;
  }
  if (child == 0) {
    signal(SIGPIPE, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (slave >= 0) {
      setsid();
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0), dup2(slave, 1), dup2(slave, 2);
    } else {
      setpgid(0, 0);
      dup2(in_fd, 0);
      dup2(out_fd, 1);
      dup2(err_fd, 2);
    }
    /* what failed, and its errno, for the parent to say */
    int f[2] = {0, 0};
    if (cwd && chdir(cwd) < 0) f[0] = 1, f[1] = errno;
    if (!f[0] && gid >= 0 && ngroups >= 0 && setgroups((size_t)ngroups, groups) < 0) f[0] = 2, f[1] = errno;
    if (!f[0] && gid >= 0 && setgid((gid_t)gid) < 0) f[0] = 2, f[1] = errno;
    if (!f[0] && uid >= 0 && setuid((uid_t)uid) < 0) f[0] = 3, f[1] = errno;
    if (!f[0]) {
      execvp(cmd[0], cmd);
      f[0] = 4, f[1] = errno;
    }
    ssize_t w = write(execpipe[1], f, sizeof f);
    (void)w;
    _exit(127);
  }
  close(execpipe[1]);
  ssize_t got;
  do got = read(execpipe[0], e, 2 * sizeof(int));
  while (got < 0 && errno == EINTR);
  close(execpipe[0]);
  if (got == (ssize_t)(2 * sizeof(int))) {
    waitpid(child, NULL, 0);
    return -1;
  }
  e[0] = 0, e[1] = 0;
  return child;
}

/* What fork_cmd's e says, as "cannot ...". */
static void start_error(char *buf, size_t len, const int e[2]) {
  if (e[0] == 1) snprintf(buf, len, "cannot change to %s: %s", cwd, strerror(e[1]));
  else if (e[0] == 2) snprintf(buf, len, "cannot take group %ld: %s", gid, strerror(e[1]));
  else if (e[0] == 3) snprintf(buf, len, "cannot become user %ld: %s", uid, strerror(e[1]));
  else snprintf(buf, len, "cannot start %s: %s", cmd[0], strerror(e[1]));
}

static int status_json(char *buf, size_t len, int status) {
  if (WIFSIGNALED(status))
    return snprintf(buf, len, "{\"signal\":%d,\"ended_at_ms\":%lld}", WTERMSIG(status), (long long)now_ms());
  return snprintf(buf, len, "{\"code\":%d,\"ended_at_ms\":%lld}", WEXITSTATUS(status), (long long)now_ms());
}

/* DIR/run.json: the current run's pid (0 when it could not start), the restarts so far, how the last run ended. */
static void write_run(pid_t pid, int restarts, const char *last) {
  char tmp[PATH_MAX], path[PATH_MAX], body[256];
  snprintf(tmp, sizeof tmp, "%s/run.json.tmp", dir);
  snprintf(path, sizeof path, "%s/run.json", dir);
  int n = snprintf(body, sizeof body, "{\"pid\":%d,\"restarts\":%d,\"last\":%s}\n", (int)pid, restarts, last);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  int ok = write(fd, body, (size_t)n) == n;
  close(fd);
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* The signals that, sent through svc, mean "stop": no restart after them. */
static int stops(int sig) { return sig == SIGINT || sig == SIGQUIT || sig == SIGKILL || sig == SIGTERM; }

/* A run that ended, before the next: what it left in its group is killed, what its pipes hold is kept. */
static void end_run(pid_t child, int srcs[2], struct journal *js, char *buf, size_t len) {
  if (child > 0) kill(-child, SIGKILL);
  for (int k = 0; k < 2; k++) {
    if (srcs[k] < 0) continue;
    ssize_t n;
    while ((n = read(srcs[k], buf, len)) > 0) journal_write(&js[k], buf, (size_t)n);
    close(srcs[k]);
    srcs[k] = -1;
  }
}

/*
 * The next run of CMD (--restart; no terminal, input /dev/null) on new pipes into the same
 * journals. -1 when it cannot start; why is then said on its stderr, as a shell would.
 */
static pid_t next_run(int srcs[2], struct journal *js) {
  int o[2] = {-1, -1}, er[2] = {-1, -1}, e[2] = {4, 0};
  pid_t pid = -1;
  if (pipe2(o, O_CLOEXEC) == 0 && pipe2(er, O_CLOEXEC) == 0) {
    fcntl(o[0], F_SETPIPE_SZ, 1 << 20);
    fcntl(er[0], F_SETPIPE_SZ, 1 << 20);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid = fork_cmd(devnull, o[1], er[1], -1, e);
    close(devnull);
  } else {
    e[1] = errno;
  }
  if (o[1] >= 0) close(o[1]);
  if (er[1] >= 0) close(er[1]);
  if (pid < 0) {
    if (o[0] >= 0) close(o[0]);
    if (er[0] >= 0) close(er[0]);
    char why[PATH_MAX + 128], line[PATH_MAX + 160];
    start_error(why, sizeof why, e);
    int n = snprintf(line, sizeof line, "svc-keep: %s\n", why);
    journal_write(&js[1], line, (size_t)n);
    return -1;
  }
  srcs[0] = o[0], srcs[1] = er[0];
  set_nonblock(o[0]);
  set_nonblock(er[0]);
  return pid;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: svc-keep DIR CAP SEGMENT [options] -- CMD [ARG...]\n");
    return 2;
  }
  closefrom(3); /* nothing the agent had open stays open for as long as CMD runs */
  dir = argv[1];
  cap = strtoull(argv[2], NULL, 10);
  segsize = strtoull(argv[3], NULL, 10);
  if (segsize < 4096) segsize = 4096;
  if (cap < segsize) cap = segsize;
  int pty = 0, with_stdin = 0, cols = 80, rows = 24, max_restarts = -1;
  enum restart_policy restart = RESTART_NO;
  int i = 4;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (!strcmp(argv[i], "--pty") && i + 2 < argc) {
      pty = 1;
      cols = atoi(argv[++i]);
      rows = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--stdin")) {
      with_stdin = 1;
    } else if (!strcmp(argv[i], "--cwd") && i + 1 < argc) {
      cwd = argv[++i];
    } else if (!strcmp(argv[i], "--uid") && i + 1 < argc) {
      uid = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--gid") && i + 1 < argc) {
      gid = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--groups") && i + 1 < argc) {
      ngroups = 0;
      for (char *p = argv[++i]; *p && ngroups < MAX_GROUPS;) {
        groups[ngroups++] = (gid_t)strtoul(p, &p, 10);
        if (*p == ',') p++;
        else break;
      }
    } else if (!strcmp(argv[i], "--restart") && i + 1 < argc) {
      const char *p = argv[++i];
      if (!strcmp(p, "always")) restart = RESTART_ALWAYS;
      else if (!strcmp(p, "on-failure")) restart = RESTART_ON_FAILURE;
      else {
        printf("error unknown restart policy %s\n", p);
        return 2;
      }
    } else if (!strcmp(argv[i], "--max-restarts") && i + 1 < argc) {
      max_restarts = atoi(argv[++i]);
    } else {
      printf("error unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    printf("error no command\n");
    return 2;
  }
  if (restart != RESTART_NO && (pty || with_stdin)) {
    printf("error --restart takes no --pty or --stdin\n");
    return 2;
  }
  cmd = argv + i + 1;
  setsid(); /* a session of its own (the agent's death is not ours); fails harmlessly if already */

  int out_r = -1, out_w = -1, err_r = -1, err_w = -1, in_r = -1, in_w = -1, slave = -1;
  if (pty) {
    out_r = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (out_r < 0 || grantpt(out_r) < 0 || unlockpt(out_r) < 0) die_start("openpt");
    const char *name = ptsname(out_r);
    if (!name) die_start("ptsname");
    slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) die_start("open pts");
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(out_r, TIOCSWINSZ, &ws);
    in_w = out_r;
  } else {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
    out_r = p[0], out_w = p[1];
    if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
    err_r = p[0], err_w = p[1];
    /* Room for a fast writer's bursts: fewer wake-ups and larger journal writes (best effort; the
       default limit for a user is 1 MiB). */
    fcntl(out_r, F_SETPIPE_SZ, 1 << 20);
    fcntl(err_r, F_SETPIPE_SZ, 1 << 20);
    if (with_stdin) {
      if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
      in_r = p[0], in_w = p[1];
    }
  }
  int ctl = open_fifo("ctl");
  reserve_exit();
  int fifo_in = with_stdin ? open_fifo("stdin") : -1;
  if (pipe2(sigpipe_fds, O_CLOEXEC) < 0) die_start("pipe");
  set_nonblock(sigpipe_fds[0]);
  set_nonblock(sigpipe_fds[1]);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);

  int devnull_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int e[2];
  pid_t child = fork_cmd(with_stdin ? in_r : devnull_in, out_w, err_w, slave, e);
  close(devnull_in);
  if (slave >= 0) close(slave);
  if (out_w >= 0) close(out_w);
  if (err_w >= 0) close(err_w);
  if (in_r >= 0) close(in_r);
  if (child < 0) {
    char why[PATH_MAX + 128];
    start_error(why, sizeof why, e);
    printf("error %s\n", why);
    return 1;
  }
  printf("ok %d %d\n", (int)child, (int)getpid());
  fflush(stdout);
  int restarts = 0, backoff = 0, stop_wanted = 0;
  int64_t run_started = mono_ms(), restart_at = 0;
  char last[128];
  if (restart != RESTART_NO) write_run(child, 0, "null");
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 1);
  dup2(devnull, 2);
  dup2(devnull, 0);

  int maxsegs = (int)(cap / segsize);
  if (maxsegs < 1) maxsegs = 1;
  struct journal js[2] = {
      {.name = pty ? "pty" : "stdout", .fd = -1, .max = maxsegs},
      {.name = "stderr", .fd = -1, .max = maxsegs},
  };
  for (int k = 0; k < 2; k++) js[k].starts = calloc((size_t)maxsegs, sizeof(uint64_t));
  int srcs[2] = {out_r, err_r};
  set_nonblock(out_r);
  if (err_r >= 0) set_nonblock(err_r);
  if (in_w >= 0 && !pty) set_nonblock(in_w);

  static char buf[1 << 18];
  char ctlbuf[256];
  size_t ctllen = 0;
  char *pending = NULL; /* stdin bytes CMD has not taken yet */
  size_t pendlen = 0, pendoff = 0;
  int status = 0, exited = 0, eof_wanted = 0;
  int64_t drain_until = 0;
  for (;;) {
    struct pollfd p[6];
    int np = 0, idx_src[2] = {-1, -1}, idx_ctl, idx_sig, idx_fin = -1, idx_inw = -1;
    for (int k = 0; k < 2; k++)
      if (srcs[k] >= 0) idx_src[k] = np, p[np++] = (struct pollfd){.fd = srcs[k], .events = POLLIN};
    idx_ctl = np, p[np++] = (struct pollfd){.fd = ctl, .events = POLLIN};
    idx_sig = np, p[np++] = (struct pollfd){.fd = sigpipe_fds[0], .events = POLLIN};
    if (fifo_in >= 0 && in_w >= 0 && pendlen == 0) idx_fin = np, p[np++] = (struct pollfd){.fd = fifo_in, .events = POLLIN};
    if (in_w >= 0 && pendlen > 0) idx_inw = np, p[np++] = (struct pollfd){.fd = in_w, .events = POLLOUT};
    int timeout = -1;
    if (exited) {
      int64_t left = drain_until - mono_ms();
      if (left > 0 && (srcs[0] >= 0 || srcs[1] >= 0)) {
        timeout = (int)left;
      } else if (restart == RESTART_NO || stop_wanted || (max_restarts >= 0 && restarts >= max_restarts) ||
                 (restart == RESTART_ON_FAILURE && WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        break;
      } else {
        /* this run is over: the next after the back-off */
        end_run(child, srcs, js, buf, sizeof buf);
        status_json(last, sizeof last, status);
        if (mono_ms() - run_started >= BACKOFF_RESET_MS) backoff = 0;
        int64_t delay = (int64_t)BACKOFF_FIRST_MS << backoff;
        if (delay >= BACKOFF_MAX_MS) delay = BACKOFF_MAX_MS;
        else backoff++;
        restart_at = mono_ms() + delay;
        child = -1, exited = 0;
        continue;
      }
    } else if (child < 0) {
      if (stop_wanted) break;
      int64_t left = restart_at - mono_ms();
      if (left <= 0) {
        restarts++;
        run_started = mono_ms();
        child = next_run(srcs, js);
        write_run(child > 0 ? child : 0, restarts, last);
        if (child < 0) status = 127 << 8, exited = 1, drain_until = 0;
        continue;
      }
      timeout = (int)left;
    }
    int r = poll(p, (nfds_t)np, timeout);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    for (int k = 0; k < 2; k++) {
      if (idx_src[k] < 0 || !(p[idx_src[k]].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(srcs[k], buf, sizeof buf);
      if (n > 0) {
        journal_write(&js[k], buf, (size_t)n);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        /* EOF, or EIO on a terminal whose other side is closed */
        if (!(pty && k == 0 && in_w == srcs[k])) close(srcs[k]);
        srcs[k] = -1;
      }
    }
    if (p[idx_sig].revents & POLLIN) {
      ssize_t n;
      while ((n = read(sigpipe_fds[0], buf, sizeof buf)) > 0)
        if (memchr(buf, 't', (size_t)n)) stop_wanted = 1;
      if (!exited && child > 0 && waitpid(child, &status, WNOHANG) == child) {
        exited = 1;
        drain_until = mono_ms() + DRAIN_MS;
      }
    }
    if (p[idx_ctl].revents & POLLIN) {
      ssize_t n = read(ctl, ctlbuf + ctllen, sizeof ctlbuf - 1 - ctllen);
      if (n > 0) ctllen += (size_t)n;
      char *nl;
      while ((nl = memchr(ctlbuf, '\n', ctllen)) != NULL) {
        *nl = 0;
        int c, rr;
        if (sscanf(ctlbuf, "resize %d %d", &c, &rr) == 2 && pty) {
          struct winsize ws = {.ws_row = (unsigned short)rr, .ws_col = (unsigned short)c};
          ioctl(out_r >= 0 ? out_r : in_w, TIOCSWINSZ, &ws);
        } else if (!strcmp(ctlbuf, "eof") && in_w >= 0) {
          eof_wanted = 1; /* carried out below, once the input sent before it is passed on */
        } else if (!strcmp(ctlbuf, "stop")) {
          stop_wanted = 1;
        } else if (sscanf(ctlbuf, "signal %d", &c) == 1 && c > 0 && c < 65) {
          if (stops(c)) stop_wanted = 1;
          /* to the current run's group (members may outlive its leader), or the leader alone */
          if (child > 0 && kill(-child, c) < 0) kill(child, c);
        }
        size_t used = (size_t)(nl - ctlbuf) + 1;
        memmove(ctlbuf, ctlbuf + used, ctllen - used);
        ctllen -= used;
      }
      if (ctllen == sizeof ctlbuf - 1) ctllen = 0; /* a line too long: dropped */
    }
    if (idx_fin >= 0 && (p[idx_fin].revents & POLLIN)) {
      ssize_t n = read(fifo_in, buf, sizeof buf);
      if (n > 0) {
        pending = realloc(pending, (size_t)n);
        memcpy(pending, buf, (size_t)n);
        pendlen = (size_t)n, pendoff = 0;
      }
    }
    if (pendlen > 0 && in_w >= 0 && (idx_inw < 0 || (p[idx_inw].revents & (POLLOUT | POLLERR | POLLHUP)))) {
      ssize_t w = write(in_w, pending + pendoff, pendlen - pendoff);
      if (w > 0) pendoff += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) pendoff = pendlen; /* CMD closed its input */
      if (pendoff == pendlen) pendlen = pendoff = 0;
    }
    /* The end of input comes after every byte sent before it. The agent writes all of the input
       into the stdin FIFO before it sends "eof", but both FIFOs can be ready in one poll round and
       "eof" is read first: so the FIFO is drained (and what it held passed on) before CMD's input
       is closed, or, on a terminal, before ^D is typed. */
    if (eof_wanted && in_w >= 0 && pendlen == 0) {
      ssize_t n = fifo_in >= 0 ? read(fifo_in, buf, sizeof buf) : -1;
      if (n > 0) {
        pending = realloc(pending, (size_t)n);
        memcpy(pending, buf, (size_t)n);
        pendlen = (size_t)n, pendoff = 0;
      } else if (pty) {
        char eof = 4; /* ^D at the start of a line: the terminal's end of input */
        ssize_t w = write(in_w, &eof, 1);
        (void)w;
        eof_wanted = 0;
      } else {
        close(in_w);
        in_w = -1;
        eof_wanted = 0;
      }
    }
  }
  if (!exited && child > 0) waitpid(child, &status, 0);
  for (int k = 0; k < 2; k++)
    if (js[k].fd >= 0) fsync(js[k].fd);
  write_exit(status, js, 2);
  return 0;
}
