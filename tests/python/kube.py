"""A real kube-apiserver on etcd for the Python tests (scripts/peers/apiserver.sh), and a plain
REST client of its own (urllib, the admin token, TLS verified against the server's certificate),
so what a test reads from the API server never passes through kcsi."""
import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request


class ApiServer:
    """Started in `dir` (which it removes at `stop`). A watchdog stops it too when the test
    process dies without running its teardown (SIGKILL)."""

    def __init__(self, repo, dir):
        self.dir = dir
        self.script = os.path.join(repo, "scripts/peers/apiserver.sh")
        watchdog = (f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
                    f"bash {self.script} stop {dir} >/dev/null 2>&1; rm -rf {dir}")
        # Started by a shell that exits at once, so the watchdog is not this process's child.
        subprocess.run(["bash", "-c", f"setsid bash -c '{watchdog}' </dev/null >/dev/null 2>&1 &"], check=True)
        r = subprocess.run(["bash", self.script, "start", dir], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"apiserver.sh start {dir} failed:\n{r.stdout}{r.stderr}")
        with open(os.path.join(dir, "env")) as f:
            env = dict(line.strip().split("=", 1) for line in f if "=" in line)
        self.url = env["APISERVER_URL"]
        self.kubeconfig = env["KUBECONFIG"]
        with open(env["TOKEN_FILE"]) as f:
            self.token = f.read().strip()
        self.tls = ssl.create_default_context(cafile=os.path.join(dir, "certs", "apiserver.crt"))

    def stop(self):
        subprocess.run(["bash", self.script, "stop", self.dir], capture_output=True, stdin=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, path, body=None):
        """The decoded answer to `method path`; None for a 404 of a GET. Other failures raise,
        naming the request and the server's answer."""
        req = urllib.request.Request(
            self.url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404 and method == "GET":
                return None
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None

    def create(self, path, obj):
        return self.request("POST", path, obj)

    def get(self, path):
        return self.request("GET", path)
