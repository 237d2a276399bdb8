#!/bin/sh
# Respawned by init: the svc guest agent. Agent deploy replaces /opt/svc/agent and kills the
# running agent (its pid is in /run/svc/agent.pid); init starts the new one.
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root SHELL=/bin/sh
exec /usr/local/bin/node /opt/svc/agent/svc-agent.cjs --listen 0.0.0.0:7475 --vsock-port 7475 \
  --state-dir /var/lib/svc --run-dir /run/svc >/dev/null 2>>/var/log/svc-agent.log
