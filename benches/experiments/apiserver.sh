# Sourced by the experiments' run scripts: starts etcd and kube-apiserver of tests/k8s/assets
# in a temporary directory, stopped and removed when the script exits. Sets `work` (the
# directory), `api_port`, `token` (a system:masters bearer token) and `apiserver` (its PID),
# and defines `log`. Expects `repo` and `experiment` (a name for the log lines).

log() { printf '%s: %s\n' "$experiment" "$*" >&2; }

assets="$("$repo/tests/k8s/assets")"
work="$(mktemp -d)"
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
etcd_port="$(free_port)"
peer_port="$(free_port)"
api_port="$(free_port)"
token="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$token,experiment,experiment,system:masters" >"$work/tokens.csv"
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
openssl rsa -in "$work/sa.key" -pubout -out "$work/sa.pub" 2>/dev/null

"$assets/etcd" --name=default --data-dir="$work/etcd" \
	--listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
	--listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
	--initial-cluster="default=http://127.0.0.1:$peer_port" --initial-cluster-state=new \
	--unsafe-no-fsync --log-level=warn >"$work/etcd.log" 2>&1 &
pids+=($!)
"$assets/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
	--cert-dir="$work/certs" --token-auth-file="$work/tokens.csv" --authorization-mode=RBAC \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$work/sa.pub" --service-account-signing-key-file="$work/sa.key" \
	--service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none >"$work/apiserver.log" 2>&1 &
apiserver=$!
pids+=("$apiserver")

log "waiting for kube-apiserver on port $api_port"
for _ in $(seq 120); do
	if curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" >/dev/null; then break; fi
	sleep 1
done
curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" >/dev/null ||
	{ log "error: kube-apiserver not ready after 120 s; see $work/apiserver.log"; tail -20 "$work/apiserver.log" >&2; exit 1; }
