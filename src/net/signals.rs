//! The signals an operator sends: SIGTERM and SIGINT start a graceful shutdown ([`shutdown_signal`]);
//! SIGHUP, which operators and logrotate send by habit and whose default action kills the process, is
//! taken over at once and reloads the config, which reopens the request_log file too ([`Hangups`]),
//! never stopping the proxy.

use std::future::Future;

/// SIGHUP, taken over for the life of the process: its default action kills the process, and
/// operators and logrotate send it by habit. It reloads the config (and so reopens the request_log
/// file, logrotate's `create` mode) and never stops the proxy.
pub struct Hangups {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    /// Takes SIGHUP over at once (before start, so an early hangup cannot kill the process).
    pub fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::hangup()) {
                Ok(signal) => Hangups {
                    signal: Some(signal),
                },
                Err(err) => {
                    tracing::warn!(%err, "cannot listen for SIGHUP: a hangup will stop tokentap");
                    Hangups { signal: None }
                }
            }
        }
        #[cfg(not(unix))]
        Hangups {}
    }

    /// From now on, each SIGHUP runs `reload` to its end (the reload logs what it did); hangups that
    /// arrive meanwhile make one more run, not one each.
    pub fn reload<F, R>(self, reload: F)
    where
        F: Fn() -> R + Send + 'static,
        R: Future<Output = ()> + Send,
    {
        #[cfg(not(unix))]
        let _ = reload;
        #[cfg(unix)]
        if let Some(mut hangups) = self.signal {
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    tracing::info!("SIGHUP received: reloading the config");
                    reload().await;
                }
            });
        }
    }
}

/// SIGHUP taken over with nothing to reopen (the demo, which has no request_log).
pub fn ignore_hangups() {
    let hangups = Hangups::listen();
    #[cfg(unix)]
    if let Some(mut hangups) = hangups.signal {
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP received: nothing to reopen (the log is stderr); ignored");
            }
        });
    }
}

/// Registers for SIGTERM and SIGINT at once (a signal that arrives before the returned future is
/// first polled is not lost, nor left to its default action of killing the process); the future
/// completes at the first of them.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (term, interrupt) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        async move {
            match (term, interrupt) {
                (Ok(mut term), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = term.recv() => {},
                        _ = interrupt.recv() => {},
                    }
                }
                (Ok(mut only), Err(err)) | (Err(err), Ok(mut only)) => {
                    tracing::warn!(%err, "cannot listen for one of SIGTERM/SIGINT");
                    only.recv().await;
                }
                (Err(err), Err(_)) => {
                    tracing::warn!(%err, "cannot listen for SIGTERM/SIGINT; falling back to Ctrl-C");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
