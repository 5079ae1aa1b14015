#!/usr/bin/env python3
"""Logs the ARP and TCP packets one interface sees, one line each with a monotonic time
(bench/migrate_tcp.sh CAPTURE=FILE: what the clients' side saw during the moves).

    python3 bench/packet_log.py DEVICE OUT_FILE SECONDS

Columns: time, packet type (0 to this host, 1 broadcast, 4 sent by it), then for ARP the
operation, hardware addresses, sender and target IP; for TCP the hardware addresses, the
endpoints, the flags (hex), sequence, acknowledgement and payload length."""
import socket, struct, sys, time
dev, out, dur = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(3))
s.bind((dev, 0))
s.settimeout(0.5)
end = time.monotonic() + dur
with open(out, "w") as f:
    while time.monotonic() < end:
        try:
            pkt, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        t = time.monotonic()
        dst, src, et = pkt[0:6].hex(), pkt[6:12].hex(), struct.unpack("!H", pkt[12:14])[0]
        d = "%d" % addr[2]  # pkttype: 0 host, 4 outgoing
        if et == 0x0806:
            op = struct.unpack("!H", pkt[20:22])[0]
            f.write("%.4f %s ARP op%d %s %s->%s sip=%s tip=%s\n" % (t, d, op, src, dst, pkt[22:28].hex(), socket.inet_ntoa(pkt[28:32]), socket.inet_ntoa(pkt[38:42])))
        elif et == 0x0800 and pkt[23] == 6:
            ihl = (pkt[14] & 15) * 4
            tcp = pkt[14 + ihl:]
            sp, dp, seq, ack = struct.unpack("!HHII", tcp[:12])
            fl = tcp[13]
            ln = len(pkt) - 14 - ihl - (tcp[12] >> 4) * 4
            f.write("%.4f %s TCP %s->%s %s:%d > %s:%d fl=%02x seq=%d ack=%d len=%d\n" % (t, d, src, dst, socket.inet_ntoa(pkt[26:30]), sp, socket.inet_ntoa(pkt[30:34]), dp, fl, seq, ack, ln))
