// svc-sys: the guest agent's Node-API addon for the system calls of an identity, the clock
// (settimeofday), the hostname (sethostname) and the random generator's reseed (two ioctls), made
// in the agent's own process. A guest restored from a saved state answers its identity first, and
// under TCG a process started for it (a fork of `date` by the agent's shell) costs tens of
// milliseconds of code translated anew (docs/suspend-and-clones.md). Errors are thrown as Error with `code` set to the errno's name.
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <node_api.h>

#define HOSTNAME_MAX 64
#define TIME_MAX_MS 253402300799000.0 // 9999-12-31T23:59:59Z

static const char *errno_name(int err) {
  switch (err) {
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case EFAULT: return "EFAULT";
    case ENOENT: return "ENOENT";
    case ENODATA: return "ENODATA";
    default: return "EIO";
  }
}

static napi_value throw_errno(napi_env env, const char *call, int err) {
  char msg[160];
  napi_value code, text, e;
  snprintf(msg, sizeof msg, "%s: %s", call, strerror(err));
  if (napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) == napi_ok &&
      napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text) == napi_ok &&
      napi_create_error(env, code, text, &e) == napi_ok) {
    napi_throw(env, e);
  }
  return NULL;
}

// setTime(ms): the wall clock to `ms` milliseconds since the epoch.
static napi_value set_time(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double ms;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_double(env, argv[0], &ms) != napi_ok || !(ms >= 0 && ms <= TIME_MAX_MS)) {
    napi_throw_type_error(env, "EINVAL", "setTime takes a time in milliseconds since the epoch, 0 to year 9999");
    return NULL;
  }
  long long whole = (long long)ms;
  struct timeval tv = { .tv_sec = (time_t)(whole / 1000), .tv_usec = (suseconds_t)((whole % 1000) * 1000) };
  if (settimeofday(&tv, NULL) != 0) return throw_errno(env, "settimeofday", errno);
  return NULL;
}

// setHostname(name): the kernel's hostname, 1 to 63 bytes.
static napi_value set_hostname(napi_env env, napi_callback_info info) {
  size_t argc = 1, len = 0, full = 0;
  napi_value argv[1];
  char name[HOSTNAME_MAX + 1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_string_utf8(env, argv[0], NULL, 0, &full) != napi_ok || full == 0 || full >= HOSTNAME_MAX ||
      napi_get_value_string_utf8(env, argv[0], name, sizeof name, &len) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setHostname takes a name of 1 to 63 bytes");
    return NULL;
  }
  if (sethostname(name, len) != 0) return throw_errno(env, "sethostname", errno);
  return NULL;
}

#define ENTROPY_MAX 512

// reseed(buffer): credits the bytes to the kernel's entropy pool (RNDADDENTROPY, 8 bits a byte)
// and reseeds its generator from the pool at once (RNDRESEEDCRNG). Copies of one saved state (clones,
// forks) hold the same generator state; without this they draw the same numbers until the kernel
// reseeds on its own, up to a minute later. Both need CAP_SYS_ADMIN (the agent runs as root).
static napi_value reseed(napi_env env, napi_callback_info info) {
  size_t argc = 1, len = 0;
  napi_value argv[1];
  void *data = NULL;
  bool is_buffer = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_is_buffer(env, argv[0], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[0], &data, &len) != napi_ok || len == 0 || len > ENTROPY_MAX) {
    napi_throw_type_error(env, "EINVAL", "reseed takes a Buffer of 1 to 512 bytes");
    return NULL;
  }
  struct {
    struct rand_pool_info info;
    unsigned char buf[ENTROPY_MAX];
  } add;
  add.info.entropy_count = (int)(len * 8);
  add.info.buf_size = (int)len;
  memcpy(add.buf, data, len);
  int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, "open /dev/urandom", errno);
  int err = 0;
  if (ioctl(fd, RNDADDENTROPY, &add) != 0) err = errno;
  else if (ioctl(fd, RNDRESEEDCRNG) != 0) err = errno;
  close(fd);
  memset(&add, 0, sizeof add);
  if (err) return throw_errno(env, "reseed", err);
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor props[] = {
    { "setTime", NULL, set_time, NULL, NULL, NULL, napi_enumerable, NULL },
    { "setHostname", NULL, set_hostname, NULL, NULL, NULL, napi_enumerable, NULL },
    { "reseed", NULL, reseed, NULL, NULL, NULL, napi_enumerable, NULL },
  };
  if (napi_define_properties(env, exports, sizeof props / sizeof props[0], props) != napi_ok) return NULL;
  return exports;
}
