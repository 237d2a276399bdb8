/*
 * svc-fdpass LINE
 *
 * Sends LINE (one QMP command, a newline added) on the Unix socket at fd 3 with fd 4 attached
 * (SCM_RIGHTS), in one sendmsg(2). The daemon hands it its own QMP connection to a VM's QEMU and
 * a file it opened: QEMU drops its privileges after start (-runas) and cannot open files in the
 * daemon's private directories itself, so a file it must use later (a fork's new disk layer,
 * src/adapters/hypervisor/qemu/vm-capture.ts) reaches it as a descriptor, the way its first disk
 * did (`-add-fd`). Node cannot attach descriptors to a socket write. QEMU's answer is read by the
 * daemon on that connection; this helper only writes. Exit 0 once sent, 1 on failure (errno's
 * words on stderr).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define SOCK_FD 3
#define PASS_FD 4
#define LINE_MAX_BYTES 4096

int main(int argc, char **argv) {
  if (argc != 2 || strlen(argv[1]) + 1 > LINE_MAX_BYTES || strchr(argv[1], '\n')) {
    fprintf(stderr, "usage: svc-fdpass LINE (one line, under %d bytes)\n", LINE_MAX_BYTES);
    return 2;
  }
  char line[LINE_MAX_BYTES + 1];
  size_t len = strlen(argv[1]);
  memcpy(line, argv[1], len);
  line[len++] = '\n';

  char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof control);
  struct iovec iov = {.iov_base = line, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  int fd = PASS_FD;
  memcpy(CMSG_DATA(c), &fd, sizeof fd);

  // The socket is the daemon's and non-blocking: a full buffer waits in poll, 5 s at most.
  for (;;) {
    ssize_t n = sendmsg(SOCK_FD, &msg, MSG_NOSIGNAL);
    if (n == (ssize_t)len) return 0;
    if (n >= 0) {
      fprintf(stderr, "svc-fdpass: short send (%zd of %zu bytes)\n", n, len);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) break;
    struct pollfd p = {.fd = SOCK_FD, .events = POLLOUT};
    if (poll(&p, 1, 5000) <= 0) break;
  }
  fprintf(stderr, "svc-fdpass: sendmsg: %s\n", strerror(errno));
  return 1;
}
