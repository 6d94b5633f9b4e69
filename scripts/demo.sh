#!/usr/bin/env bash
# The main job on a fresh machine: build pcapsync, start a collector and
# two agents, generate traffic, stop everything cleanly and show what
# the collector wrote.
#
# As root (the default on a server), three network namespaces stand in
# for three hosts: "hub" runs the collector, "host1" and "host2" each run
# an agent capturing its veth link to the hub, while the hub sends them
# UDP traffic. Without root, two agents replay generated files instead.
# Agents and collector speak mutual TLS with certificates made by
# "pcapsync gen certs" in out/demo/certs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
go build -buildvcs=auto -o bin/pcapsync ./cmd/pcapsync
bin=$PWD/bin/pcapsync
out=$PWD/out/demo
rm -rf "$out"; mkdir -p "$out"
logs=$out/logs; mkdir -p "$logs"
count=${DEMO_PACKETS:-3000}
certs=$out/certs
"$bin" gen certs --dir "$certs" --collector localhost,127.0.0.1,198.18.1.1,198.18.2.1 --agents host1,host2 >/dev/null
coll_tls=(--tls-cert "$certs/collector.pem" --tls-key "$certs/collector-key.pem" --tls-client-ca "$certs/ca.pem")
agent_tls() { agent_args=(--tls-ca "$certs/ca.pem" --tls-cert "$certs/agent-$1.pem" --tls-key "$certs/agent-$1-key.pem"); }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for n in hub host1 host2; do ip netns del "pcsdemo-$n" 2>/dev/null || true; done
}
trap cleanup EXIT

stop() { kill -TERM "$1"; wait "$1"; }

if [ "$(id -u)" -eq 0 ] && ip netns add pcsdemo-hub 2>/dev/null; then
	echo "== three namespaces: hub (collector), host1 and host2 (agents)"
	for i in 1 2; do
		ip netns add "pcsdemo-host$i"
		ip link add "hub$i" netns pcsdemo-hub type veth peer name eth0 netns "pcsdemo-host$i"
		ip -n pcsdemo-hub addr add "198.18.$i.1/30" dev "hub$i"
		ip -n "pcsdemo-host$i" addr add "198.18.$i.2/30" dev eth0
		ip -n pcsdemo-hub link set "hub$i" up
		ip -n "pcsdemo-host$i" link set eth0 up
		ip -n "pcsdemo-host$i" link set lo up
	done
	ip -n pcsdemo-hub link set lo up
	ip netns exec pcsdemo-hub "$bin" collector "${coll_tls[@]}" --listen 0.0.0.0:7733 --dir "$out/files" \
		>"$logs/collector.out" 2>"$logs/collector.log" &
	coll=$!; pids+=("$coll")
	sleep 0.5
	agents=()
	for i in 1 2; do
		agent_tls "host$i"
		ip netns exec "pcsdemo-host$i" "$bin" agent "${agent_args[@]}" --collector "198.18.$i.1:7733" --name "host$i" \
			--iface eth0 udp >"$logs/agent$i.out" 2>"$logs/agent$i.log" &
		agents+=($!); pids+=($!)
	done
	for i in 1 2; do
		until grep -q "connected to collector" "$logs/agent$i.log"; do sleep 0.1; done
	done
	echo "== hub sends $count UDP packets to each host at 1000/s"
	for i in 1 2; do
		ip netns exec pcsdemo-hub "$bin" gen udp --to "198.18.$i.2:5555" --count "$count" --rate 1000 --stream "$i" &
		gens+=($!)
	done
	wait "${gens[@]}"
	sleep 0.3
else
	echo "== not root (or no network namespaces): two agents replay generated files"
	"$bin" collector "${coll_tls[@]}" --listen 127.0.0.1:7733 --dir "$out/files" >"$logs/collector.out" 2>"$logs/collector.log" &
	coll=$!; pids+=("$coll")
	sleep 0.5
	agents=()
	for i in 1 2; do
		"$bin" gen file --out "$out/input$i.pcap" --count "$count" --mix imix --stream "$i" >/dev/null
		agent_tls "host$i"
		"$bin" agent "${agent_args[@]}" --collector 127.0.0.1:7733 --name "host$i" --read "$out/input$i.pcap" \
			>"$logs/agent$i.out" 2>"$logs/agent$i.log" &
		agents+=($!); pids+=($!)
	done
fi

echo "== stopping agents, then the collector"
for a in "${agents[@]}"; do kill -TERM "$a" 2>/dev/null || true; wait "$a" || true; done
cat "$logs"/agent*.out
stop "$coll"
cat "$logs/collector.out"

echo
echo "== files written (agent directories under $out/files)"
find "$out/files" -name '*.pcapng' | sort
echo
for f in $(find "$out/files" -name '*.pcapng' | sort); do
	capinfos -c -i -E "$f" | sed 's/^/  /'
	echo "  first packets:"
	tshark -r "$f" -c 3 -T fields -e frame.interface_name -e frame.time_epoch -e ip.src -e ip.dst -e udp.dstport -e frame.len 2>/dev/null | sed 's/^/    /'
	echo
done
echo "== both hosts merged by time into one pcapng (pcapsync query), each packet on its host's interface"
"$bin" query --dir "$out/files" -w "$out/merged.pcapng"
capinfos -c -i "$out/merged.pcapng" | sed 's/^/  /'
tshark -r "$out/merged.pcapng" -c 4 -T fields -e frame.interface_name -e frame.time_epoch -e ip.src -e ip.dst -e frame.len 2>/dev/null | sed 's/^/    /'
echo
echo "logs: $logs"
echo "mutual TLS certificates: $certs"
