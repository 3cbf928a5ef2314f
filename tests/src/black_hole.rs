//! An endpoint on loopback that accepts TCP connections and never answers: an apiserver (or
//! any backend) that hangs. What our deadlines are for.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub struct BlackHole {
    addr: SocketAddr,
    accepting: JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let accepting = tokio::spawn(async move {
            // Held open, never read from nor written to.
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Self { addr, accepting }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}
