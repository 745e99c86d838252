//! The binary's own shutdown path: SIGTERM turns an idle tokentap unready and makes it exit cleanly at
//! once (the in-process tests in `shutdown.rs` cover draining and cutting through the same code).
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(addr: &str, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

#[test]
fn sigterm_makes_an_idle_tokentap_exit_cleanly_at_once() {
    let dir = std::env::temp_dir().join(format!("tokentap-signal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("tokentap.yaml");
    let yaml = "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: http://127.0.0.1:9\nshutdown_grace: 20s\n";
    std::fs::write(&config, yaml).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tokentap");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut metrics = None;
    let mut log = String::new();
    for _ in 0..20 {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        log.push_str(&line);
        if let Some((_, rest)) = line.split_once("metrics=http://") {
            metrics = rest.split_once("/metrics").map(|(addr, _)| addr.to_owned());
            break;
        }
    }
    let Some(metrics) = metrics else {
        let _ = child.kill();
        panic!("tokentap did not log its metrics address:\n{log}");
    };
    assert!(get(&metrics, "/readyz").starts_with("HTTP/1.1 200"));
    let signalled = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = loop {
        if let Ok(Some(exit)) = child.try_wait() {
            break Some(exit);
        }
        if signalled.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = stderr.read_to_string(&mut log);
    let exit = exit.unwrap_or_else(|| panic!("tokentap did not exit after SIGTERM:\n{log}"));
    assert!(exit.success(), "exit {exit:?}:\n{log}");
    // Nothing was in flight, so no grace period was waited for.
    assert!(signalled.elapsed() < Duration::from_secs(5), "{log}");
    assert!(log.contains("shutdown requested"), "{log}");
    assert!(log.contains("tokentap stopped"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
