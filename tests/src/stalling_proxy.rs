//! A TCP relay on loopback in front of a real server (the apiserver) that can stall: while
//! stalled, bytes already on their way wait, on connections open before as on new ones, as
//! when a dependency hangs after having answered. Resumed, everything flows again.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct StallingProxy {
    addr: SocketAddr,
    stalled: watch::Sender<bool>,
    accepting: JoinHandle<()>,
}

impl StallingProxy {
    /// Relays every connection to `upstream`, flowing.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stalled, watcher) = watch::channel(false);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watcher = watcher.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        relay(client_read, server_write, watcher.clone()),
                        relay(server_read, client_write, watcher),
                    );
                });
            }
        });
        Ok(Self {
            addr,
            stalled,
            accepting,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to`, holding each chunk while stalled.
async fn relay(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, mut stalled: watch::Receiver<bool>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if stalled.wait_for(|stalled| !*stalled).await.is_err() {
            break;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
