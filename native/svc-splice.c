/*
 * svc-splice LENGTH [IDLE_SECONDS [splice|copy]]
 *
 * Moves exactly LENGTH bytes from fd 0 to fd 1 outside the daemon's event loop. The daemon hands it
 * the two sockets of a copy once it has checked the answer's head (docs/benchmarks.md).
 *
 * splice (the default) moves the bytes with splice(2) through a pipe: they pass from one socket to
 * the other inside the kernel. copy reads them into one buffer and writes them out: one more copy
 * here, but the receiver gets the same compact segments a direct client would send it, where
 * spliced ones carry the source's page fragments and cost the receiver's kernel more to take in.
 * For an upload the receiver is the agent, which is what limits the copy's speed, so the daemon asks
 * for copy there (measured: docs/benchmarks.md, "Uploads copied, downloads spliced").
 *
 * The sockets are shared with Node's event loop, which does not touch them while this runs; Node's
 * spawn makes a child's fds 0-2 blocking, and those file status flags belong to the sockets the
 * daemon shares, so the helper first makes both non-blocking again: every EAGAIN waits in poll(2)
 * (the idle limit holds) and the daemon's event loop never meets a blocking socket after a copy
 * (a keep-alive client's next answer).
 *
 * A read shorter than PACE_BELOW waits PACE_NS before the next one, as the daemon's own download
 * does (src/adapters/guest-link/raw-download.ts): QEMU's user network hands a guest's stream to
 * the host one TCP segment at a time, and a reader that wakes for each takes the CPU the guest
 * needs; a fast source fills its reads and never waits.
 *
 * When fd 1 is a socket its send buffer is raised to SEND_BUFFER (SO_SNDBUFFORCE when the daemon
 * may, else SO_SNDBUF up to the system's limit): a Unix-socket client gets the kernel's default of
 * about 200 KiB, a TCP one autotuned up to 4 MiB, and a reader that finds more waiting makes fewer
 * and larger reads.
 *
 * Never reads past LENGTH: what a guest sends beyond the length it declared stays in the socket.
 * Exit status: 0 all moved; 2 bad arguments; 3 the source ended early; 4 the source sent
 * nothing for IDLE_SECONDS (default 120); 5 the destination failed (the client left) or took nothing for
 * IDLE_SECONDS; 6 any other error.
 * Progress is not reported: the daemon knows the length and waits for the exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIECE (1 << 20)
#define PACE_BELOW (32 * 1024)
#define PACE_NS 1000000L
#define SEND_BUFFER (4 << 20)

static int idle_ms = 120 * 1000;
/* copy mode's buffer; NULL when splicing */
static char *buffer;
static int pipefd[2];

/* Up to `want` bytes from fd 0 into the pipe or the buffer. */
static ssize_t take(size_t want) {
  if (buffer) return read(0, buffer, want);
  return splice(0, NULL, pipefd[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}

/* Up to `n` bytes of what was taken out to fd 1, `done` of them already written. */
static ssize_t give(size_t done, size_t n) {
  if (buffer) return write(1, buffer + done, n);
  return splice(pipefd[0], NULL, 1, NULL, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}

/* Waits until fd is ready for `events`; 0 when it is (or hung up: the next call tells), -1 on timeout. */
static int wait_for(int fd, short events) {
  struct pollfd p = { .fd = fd, .events = events };
  for (;;) {
    int n = poll(&p, 1, idle_ms);
    if (n > 0) return 0;
    if (n == 0) return -1;
    if (errno != EINTR) return -1;
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: svc-splice LENGTH [IDLE_SECONDS [splice|copy]]\n");
    return 2;
  }
  char *end;
  errno = 0;
  unsigned long long left = strtoull(argv[1], &end, 10);
  if (errno || *end || argv[1][0] == '-' || argv[1][0] == '\0') {
    fprintf(stderr, "svc-splice: bad length %s\n", argv[1]);
    return 2;
  }
  if (argc >= 3) {
    long s = strtol(argv[2], &end, 10);
    if (*end || s <= 0 || s > INT_MAX / 1000) {
      fprintf(stderr, "svc-splice: bad idle seconds %s\n", argv[2]);
      return 2;
    }
    idle_ms = (int)s * 1000;
  }
  int copying = argc == 4 && strcmp(argv[3], "copy") == 0;
  if (argc == 4 && !copying && strcmp(argv[3], "splice") != 0) {
    fprintf(stderr, "svc-splice: bad mode %s (splice or copy)\n", argv[3]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  for (int fd = 0; fd <= 1; fd++) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      perror("svc-splice: fcntl");
      return 6;
    }
  }
  int sndbuf = SEND_BUFFER;
  if (setsockopt(1, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
    setsockopt(1, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf); /* not a socket, or not allowed: fine */

  if (copying) {
    buffer = malloc(PIECE);
    if (!buffer) {
      perror("svc-splice: malloc");
      return 6;
    }
  } else {
    if (pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) != 0) {
      perror("svc-splice: pipe");
      return 6;
    }
    fcntl(pipefd[1], F_SETPIPE_SZ, PIECE); /* a smaller pipe (an unprivileged limit) still works */
  }

  while (left > 0) {
    size_t want = left < PIECE ? (size_t)left : PIECE;
    ssize_t in = take(want);
    if (in == 0) {
      fprintf(stderr, "svc-splice: the source ended with %llu bytes to go\n", left);
      return 3;
    }
    if (in < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (wait_for(0, POLLIN) != 0) {
          fprintf(stderr, "svc-splice: nothing came for %d s with %llu bytes to go\n", idle_ms / 1000, left);
          return 4;
        }
        continue;
      }
      fprintf(stderr, "svc-splice: reading: %s\n", strerror(errno));
      return 3;
    }
    left -= (unsigned long long)in;
    ssize_t moved = in;
    while (in > 0) {
      ssize_t out = give((size_t)(moved - in), (size_t)in);
      if (out < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          if (wait_for(1, POLLOUT) != 0) {
            fprintf(stderr, "svc-splice: the destination took nothing for %d s\n", idle_ms / 1000);
            return 5;
          }
          continue;
        }
        fprintf(stderr, "svc-splice: writing: %s\n", strerror(errno));
        return 5;
      }
      in -= out;
    }
    if (moved < PACE_BELOW && left > 0) {
      struct timespec pace = { .tv_sec = 0, .tv_nsec = PACE_NS };
      nanosleep(&pace, NULL);
    }
  }
  return 0;
}
