//! The proxies under test, each a separate process pinned to its own core with `taskset`: tokentap (the
//! release binary, with a config written to a temp dir), nginx (Debian's, with its own prefix and
//! config: `proxy_buffering off`, HTTP/1.1 and keep-alive to the upstream) and HAProxy (Debian's, one
//! process and one thread, `option http-no-delay`, keep-alive to the upstream), the two anchors; and this
//! binary run again as the null relay (`relay.rs`) and as the stack's floor, a plain hyper proxy
//! (`hyper_floor.rs`). CPU time and resident memory are read from `/proc`, for nginx summed over the
//! master and its workers.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Direct,
    Tokentap,
    Nginx,
    Haproxy,
    /// A second tokentap binary (`--baseline`), for before/after comparisons in one run.
    Baseline,
    /// The null relay (`relay.rs`): the floor of what a proxy in a separate process adds.
    Relay,
    /// The plain hyper proxy (`hyper_floor.rs`): what the stack tokentap is built on costs by itself.
    Hyper,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Tokentap => "tokentap",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
            Kind::Baseline => "baseline",
            Kind::Relay => "relay",
            Kind::Hyper => "hyper",
        }
    }
}

/// Where the binaries are and which core the proxy gets.
#[derive(Debug, Clone)]
pub struct Setup {
    pub tokentap: PathBuf,
    pub baseline: Option<PathBuf>,
    pub nginx: Option<PathBuf>,
    pub haproxy: Option<PathBuf>,
    /// The program run as `PROGRAM --hyper-floor LISTEN UPSTREAM` for the stack's floor: this binary
    /// unless a profiler's wrapper is given (`--hyper PATH`).
    pub hyper: Option<PathBuf>,
    pub proxy_cpu: Option<u32>,
    pub dir: PathBuf,
    /// nginx without its master process (`master_process off`): one process serves, so a profiler
    /// wrapped around it sees the serving process itself (valgrind cannot be driven in a forked worker).
    pub nginx_single: bool,
    /// Request logs on (the default): tokentap's per-request line at `info`, nginx's access log buffered
    /// (`buffer=64k flush=1s`). Off: tokentap at `RUST_LOG=warn`, nginx `access_log off`.
    pub logs: bool,
    /// The baseline tokentap writes per-request records (`request_log: {path: "-"}`) to a stdout pipe that
    /// nobody reads: the writer stalls, records are dropped and counted, and the figures show whether the
    /// proxy's latency moves (`--baseline target/release/tokentap --baseline-records stalled`).
    pub baseline_records: bool,
}

pub struct Proxy {
    pub kind: Kind,
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    child: Child,
    /// The read end of a stdout pipe held open and never read (see [`Setup::baseline_records`]).
    _stalled_stdout: Option<std::process::ChildStdout>,
}

impl Drop for Proxy {
    /// SIGTERM first (both proxies shut down cleanly on it, and a profiler wrapped around one gets to
    /// write its output), SIGKILL after 3 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..60 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

fn pinned(setup: &Setup, program: &Path) -> Command {
    match setup.proxy_cpu {
        Some(cpu) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(cpu.to_string()).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Fine buckets (250 µs) around the scripted 50 ms gap and prefill so the accuracy check is not limited by bucket width;
/// the defaults stay in as well. Those buckets multiply the series the configuration allows beyond the
/// default `metrics.max_series` budget (which tokentap checks at start), so the budget is raised with them.
/// The upstream connection cap (default 1,024, beyond which tokentap answers 503) is raised to nginx's
/// `worker_connections`, so the sweep and the memory phase compare the two proxies at 1,500 and 5,000 streams.
fn tokentap_config(listen: SocketAddr, metrics: SocketAddr, upstream: SocketAddr) -> String {
    let fine = |from_ms: f64, to_ms: f64, step_ms: f64| {
        let mut v = Vec::new();
        let mut x = from_ms;
        while x <= to_ms + 1e-9 {
            v.push(format!("{:.5}", x / 1000.0));
            x += step_ms;
        }
        v.join(", ")
    };
    format!(
        "listen: {listen}\nmetrics_listen: {metrics}\nupstream: http://{upstream}\nmetrics:\n  max_series: 2000000\nlimits:\n  max_upstream_connections: 16000\nbuckets:\n  itl: [0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, {}, 0.075, 0.1, 0.25, 1]\n  ttft: [0.001, 0.005, 0.01, 0.025, {}, 0.075, 0.1, 0.25, 1]\n",
        fine(44.0, 56.0, 0.25),
        fine(44.0, 60.0, 0.25),
    )
}

pub fn start_tokentap(setup: &Setup, upstream: SocketAddr, kind: Kind) -> Result<Proxy, String> {
    let binary = match (kind, &setup.baseline) {
        (Kind::Baseline, Some(baseline)) => baseline,
        _ => &setup.tokentap,
    };
    let addr = free_port().map_err(|e| e.to_string())?;
    let metrics = free_port().map_err(|e| e.to_string())?;
    let config = setup.dir.join(format!("{}.yaml", kind.name()));
    let stalled = kind == Kind::Baseline && setup.baseline_records;
    let mut text = tokentap_config(addr, metrics, upstream);
    if stalled {
        text.push_str("request_log:\n  path: \"-\"\n");
    }
    std::fs::write(&config, text).map_err(|e| format!("writing {}: {e}", config.display()))?;
    let log = std::fs::File::create(setup.dir.join(format!("{}.log", kind.name())))
        .map_err(|e| e.to_string())?;
    let mut command = pinned(setup, binary);
    if !setup.logs {
        command.env("RUST_LOG", "warn");
    }
    let mut child = command
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(if stalled {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    Ok(Proxy {
        kind,
        addr,
        metrics: Some(metrics),
        _stalled_stdout: child.stdout.take(),
        child,
    })
}

pub fn start_nginx(setup: &Setup, upstream: SocketAddr) -> Result<Proxy, String> {
    let Some(nginx) = &setup.nginx else {
        return Err("no nginx".into());
    };
    let addr = free_port().map_err(|e| e.to_string())?;
    let prefix = setup.dir.join("nginx");
    std::fs::create_dir_all(prefix.join("tmp")).map_err(|e| e.to_string())?;
    let p = prefix.display();
    let master = if setup.nginx_single { "off" } else { "on" };
    let access_log = if setup.logs {
        format!("{p}/access.log combined buffer=64k flush=1s")
    } else {
        "off".to_owned()
    };
    let conf = format!(
        r#"master_process {master};
worker_processes 1;
worker_rlimit_nofile 20000;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
daemon off;
events {{ worker_connections 16000; }}
http {{
  access_log {access_log};
  client_body_temp_path {p}/tmp/body;
  proxy_temp_path {p}/tmp/proxy;
  fastcgi_temp_path {p}/tmp/fastcgi;
  uwsgi_temp_path {p}/tmp/uwsgi;
  scgi_temp_path {p}/tmp/scgi;
  keepalive_requests 1000000;
  upstream model {{
    server {upstream};
    keepalive 1024;
    keepalive_requests 1000000;
  }}
  server {{
    listen {addr} backlog=8192;
    location / {{
      proxy_pass http://model;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"#
    );
    let conf_path = prefix.join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    let child = pinned(setup, nginx)
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", nginx.display()))?;
    Ok(Proxy {
        kind: Kind::Nginx,
        addr,
        metrics: None,
        child,
        _stalled_stdout: None,
    })
}

/// HAProxy as a plain streaming reverse proxy: one process, one thread (as nginx has one worker),
/// `option http-no-delay` (no wait to merge small writes: every chunk leaves as it comes), keep-alive to
/// the upstream (`http-reuse always`). With logs on, its HTTP log line goes to a file through stdout.
/// `maxconn` 9,000: HAProxy refuses to start unless the descriptor limit holds two per connection (this
/// machine's hard limit is 20,000), and the memory phase's 5,000 streams fit under it.
pub fn start_haproxy(setup: &Setup, upstream: SocketAddr) -> Result<Proxy, String> {
    let Some(haproxy) = &setup.haproxy else {
        return Err("no haproxy".into());
    };
    let addr = free_port().map_err(|e| e.to_string())?;
    let dir = setup.dir.join("haproxy");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let log = if setup.logs {
        "  log stdout format raw local0\n"
    } else {
        ""
    };
    let conf = format!(
        "global\n  maxconn 9000\n  nbthread 1\n{log}\ndefaults\n  mode http\n  log global\n  option httplog\n  \
         option http-no-delay\n  http-reuse always\n  timeout connect 5s\n  timeout client 600s\n  \
         timeout server 600s\n  maxconn 9000\n\nfrontend bench\n  bind {addr}\n  default_backend model\n\n\
         backend model\n  server model {upstream} maxconn 9000\n"
    );
    let conf_path = dir.join("haproxy.cfg");
    std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("haproxy.log")).map_err(|e| e.to_string())?;
    let child = pinned(setup, haproxy)
        .arg("-db")
        .arg("-f")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", haproxy.display()))?;
    Ok(Proxy {
        kind: Kind::Haproxy,
        addr,
        metrics: None,
        child,
        _stalled_stdout: None,
    })
}

/// The null relay: this very binary, run again as `--relay LISTEN UPSTREAM` (`relay.rs`).
pub fn start_relay(setup: &Setup, upstream: SocketAddr) -> Result<Proxy, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    start_self(setup, &me, "--relay", upstream, Kind::Relay)
}

/// The stack's floor: this binary (or the profiler's wrapper around it), run again as
/// `--hyper-floor LISTEN UPSTREAM` (`hyper_floor.rs`).
pub fn start_hyper(setup: &Setup, upstream: SocketAddr) -> Result<Proxy, String> {
    let program = match &setup.hyper {
        Some(path) => path.clone(),
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    start_self(setup, &program, "--hyper-floor", upstream, Kind::Hyper)
}

fn start_self(
    setup: &Setup, program: &Path, flag: &str, upstream: SocketAddr, kind: Kind,
) -> Result<Proxy, String> {
    let addr = free_port().map_err(|e| e.to_string())?;
    let child = pinned(setup, program)
        .arg(flag)
        .arg(addr.to_string())
        .arg(upstream.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the {}: {e}", kind.name()))?;
    Ok(Proxy {
        kind,
        addr,
        metrics: None,
        child,
        _stalled_stdout: None,
    })
}

/// Starts the proxy of `kind` (not [`Kind::Direct`]).
pub fn start(setup: &Setup, upstream: SocketAddr, kind: Kind) -> Result<Proxy, String> {
    match kind {
        Kind::Nginx => start_nginx(setup, upstream),
        Kind::Haproxy => start_haproxy(setup, upstream),
        Kind::Relay => start_relay(setup, upstream),
        Kind::Hyper => start_hyper(setup, upstream),
        other => start_tokentap(setup, upstream, other),
    }
}

impl Proxy {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process and its children (nginx's workers).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.pid()];
        pids.extend(children(self.pid()));
        pids
    }

    /// User + system CPU seconds so far, all processes of the proxy.
    pub fn cpu_seconds(&self) -> f64 {
        self.pids().into_iter().map(cpu_seconds).sum()
    }

    /// Resident set size in bytes, all processes of the proxy.
    pub fn rss_bytes(&self) -> u64 {
        self.pids().into_iter().map(rss_bytes).sum()
    }

    /// Waits until the proxy accepts connections (up to 60 s: under valgrind it takes seconds to start).
    pub async fn ready(&mut self) -> Result<(), String> {
        for _ in 0..2400 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited: {status}", self.kind.name()));
            }
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                // nginx forks its worker after binding: give it a moment to exist.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(format!("{} did not start listening", self.kind.name()))
    }
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat_fields(p).and_then(|f| f.get(1)?.parse::<u32>().ok()) == Some(pid))
        .collect()
}

/// Fields of /proc/PID/stat after the command name: [state, ppid, ...].
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime (fields 14 and 15 of stat), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    thread_local!(static TICKS: f64 = clock_ticks());
    let Some(f) = stat_fields(pid) else {
        return 0.0;
    };
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / TICKS.with(|t| *t)
}

pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// GET /metrics from tokentap's metrics port.
pub async fn scrape(addr: SocketAddr) -> Result<String, String> {
    let mut sender = crate::load::connect(addr).await?;
    let request = http::Request::get("/metrics")
        .header(http::header::HOST, "bench.local")
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(body.to_bytes().to_vec()).map_err(|e| e.to_string())
}
