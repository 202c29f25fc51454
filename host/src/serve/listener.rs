//! The servers' listener with a cap on open connections (`--max-connections`,
//! shared by every port). A connection past the cap is accepted, answered
//! `503 Service Unavailable` with vLLM's error body and closed at once, so
//! a flood of clients costs one short write each and never queues up in
//! the servers; the connections already open are served as before.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A TCP listener that holds at most `permits` connections open.
pub struct Capped {
    pub inner: TcpListener,
    pub permits: Arc<Semaphore>,
    /// The cap, for the refusal's message.
    pub cap: usize,
    /// Connections refused so far.
    pub refused: Arc<AtomicU64>,
    /// The instance this port serves, with the fault state: while it is
    /// down (`[[serve.faults]]`) a new connection is closed unanswered.
    pub down: Option<(Arc<super::faults::FaultState>, u32)>,
}

/// An open connection; its permit returns when it closes.
pub struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Capped {
    type Io = Counted;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Counted, std::net::SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(c) => c,
                Err(_) => {
                    // Out of descriptors or a connection reset before it
                    // was accepted: wait a little, as axum's own loop does.
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            };
            if let Some((faults, i)) = &self.down {
                if faults.is_down(*i) {
                    // Closed unanswered, as a crashed server's would be
                    // (closed rather than refused: the port stays bound so
                    // the instance can come back on it).
                    drop(stream);
                    continue;
                }
            }
            match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        Counted {
                            stream,
                            _permit: permit,
                        },
                        addr,
                    );
                }
                Err(_) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(refuse(stream, self.cap));
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// Answer a connection past the cap with a 503 and close it (bounded: one
/// write of a few hundred bytes, given a second at most).
async fn refuse(mut stream: TcpStream, cap: usize) {
    let body = format!(
        r#"{{"object":"error","message":"blis serve: {cap} connections are open, the most --max-connections allows; try again later","type":"ServiceUnavailableError","param":null,"code":503}}"#
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
