//! tokentap as an operator runs it: the built binary as a child process, its config in a temp dir, its
//! stderr read up to the startup line (which gives both addresses); signals, exit, and blocking GETs;
//! a subcommand run to its end, and a scratch directory for the files it reads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::scrape::Metrics;

/// A tokentap process; `stderr` is its log pipe (drop it to close the log's reader).
pub struct Process {
    pub child: Child,
    pub stderr: Option<BufReader<ChildStderr>>,
    /// The log read so far.
    pub log: String,
    pub proxy: String,
    pub metrics: String,
    dir: std::path::PathBuf,
}

/// Starts the binary with `yaml` as its config (in a temp dir named after `name`), under `ulimit -n`
/// when `max_fds` is given, and reads its log up to the startup line.
pub fn start_binary(name: &str, yaml: &str, max_fds: Option<u32>) -> Process {
    start_binary_with(name, yaml, max_fds, Stdio::null())
}

/// As [`start_binary`], with its stdout given (`Stdio::piped()` and never read: a stalled reader).
pub fn start_binary_with(name: &str, yaml: &str, max_fds: Option<u32>, stdout: Stdio) -> Process {
    let setup = max_fds.map(|n| format!("ulimit -n {n}"));
    start_binary_after(name, yaml, setup.as_deref(), stdout)
}

/// As [`start_binary`], exec'd by `bash` after the shell commands `setup` (limits, signal
/// dispositions: `trap '' XFSZ; ulimit -S -f 8`), so the binary's pid is the shell's.
pub fn start_binary_after(name: &str, yaml: &str, setup: Option<&str>, stdout: Stdio) -> Process {
    super::assert_held("start_binary");
    let dir = std::env::temp_dir().join(format!("tokentap-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("tokentap.yaml");
    let yaml = format!("{}{yaml}", super::proxy::without_model_list(yaml));
    std::fs::write(&config, yaml).expect("write config");
    let binary = env!("CARGO_BIN_EXE_tokentap");
    let mut command = match setup {
        Some(setup) => {
            let mut sh = Command::new("bash");
            sh.args(["-c", &format!("{setup} && exec \"$0\" --config \"$1\"")])
                .arg(binary)
                .arg(&config);
            sh
        }
        None => {
            let mut direct = Command::new(binary);
            direct.arg("--config").arg(&config);
            direct
        }
    };
    let mut child = command
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tokentap");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut log = String::new();
    let mut addresses = None;
    for _ in 0..20 {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        log.push_str(&line);
        let field = |key: &str| {
            line.split_once(key)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .map(|v| v.trim_end_matches("/metrics").to_owned())
        };
        if let (Some(proxy), Some(metrics)) = (field(" listen="), field("metrics=http://")) {
            addresses = Some((proxy, metrics));
            break;
        }
    }
    let Some((proxy, metrics)) = addresses else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("tokentap did not log its addresses:\n{log}");
    };
    Process {
        child,
        stderr: Some(stderr),
        log,
        proxy,
        metrics,
        dir,
    }
}

/// Dropped, after [`Process::wait`] or in a test that failed before it: a tokentap still running is
/// killed (a failed test does not leave it behind), and its temp dir removed. In a test that failed,
/// the log is printed, with whether tokentap was still running or how it had exited.
impl Drop for Process {
    fn drop(&mut self) {
        let running = matches!(self.child.try_wait(), Ok(None));
        if running {
            let _ = self.child.kill();
        }
        let exit = self.child.wait();
        if std::thread::panicking() {
            if let Some(mut stderr) = self.stderr.take() {
                let _ = stderr.read_to_string(&mut self.log);
            }
            let how = match running {
                true => "still running when the test failed".to_owned(),
                false => format!("exited by itself: {exit:?}"),
            };
            eprintln!("tokentap ({how}), its log:\n{}", self.log);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Process {
    /// Sends a signal by name (`TERM`, `HUP`, `KILL`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits (at most [`super::HANG`]) for the process to exit; returns its status and its whole log.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let since = Instant::now();
        let exit = loop {
            if let Ok(Some(exit)) = self.child.try_wait() {
                break Some(exit);
            }
            if since.elapsed() > super::HANG {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(mut stderr) = self.stderr.take() {
            let _ = stderr.read_to_string(&mut self.log);
        }
        let log = std::mem::take(&mut self.log);
        let exit = exit.unwrap_or_else(|| panic!("tokentap did not exit:\n{log}"));
        (exit, log)
    }

    /// The temp dir the config is in (removed when the process is dropped, as [`Process::wait`] does).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn metric(&self, name: &str) -> f64 {
        self.scrape().get(name, &[])
    }

    pub fn scrape(&self) -> Metrics {
        let answer = get_blocking(&self.metrics, "/metrics").unwrap_or_default();
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        Metrics::parse(body)
    }
}

/// Writes `request` on a blocking connection to `addr` and reads until the server closes it (at most
/// `timeout` between reads); the answer's status line, "" when none came.
pub fn status_line_blocking(addr: &str, request: &[u8], timeout: Duration) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(timeout)).ok();
    stream.write_all(request).expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// A GET over a blocking connection (`connection: close`, 5 s read timeout); the whole raw answer.
pub fn get_blocking(addr: &str, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|e| format!("read: {e}"))?;
    Ok(text)
}

/// The built binary, to run with arguments.
pub fn tokentap() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

/// Runs `command` to its end, which must succeed (else its stderr is the failure); its stdout.
pub fn stdout_of(command: &mut Command) -> String {
    let out = command.output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory of one test's own under the temp dir, removed with what is in it when dropped (tests
/// run at once: one directory for all of them would be removed under the others).
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tokentap-cli-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }

    /// Writes `text` to the file `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
