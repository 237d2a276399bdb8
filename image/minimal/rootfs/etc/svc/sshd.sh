#!/bin/sh
# Respawned by init: dropbear, key logins only, host keys made on first connection.
mkdir -p /etc/dropbear
exec /usr/sbin/dropbear -F -E -R -s -p 22 2>>/var/log/dropbear.log
