//! A registry that behaves like a real one: a TCP relay in front of the local registry that
//! limits the bandwidth of what it serves and adds latency, so that image pulls take the time
//! they take from ECR or Docker Hub rather than the milliseconds of a local disk.
//!
//! The bandwidth is limited **per connection**, as registries and the CDNs behind them limit a
//! single download: a node that pulls several layers at once (containerd fetches up to three
//! layers of an image in parallel, and the kubelet several images when `serializeImagePulls` is
//! false) gets that many times the bandwidth, which is what makes layer count and parallel pulls
//! matter. An optional total limit stands for the nodes' shared uplink. Latency is added once
//! when a connection is set up and once per request (each chunk the client sends reaches the
//! registry that much later), as a round trip to a distant registry costs both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How fast the throttled registry serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Bytes per second of one connection, registry to client (`None`: unlimited).
    pub per_connection: Option<u64>,
    /// Bytes per second of all connections together (`None`: unlimited).
    pub total: Option<u64>,
    /// Added to a connection's setup and to every request.
    pub latency: Duration,
}

impl Throttle {
    /// `20MB/s` style figure for what is printed.
    pub fn describe(&self) -> String {
        let rate = |r: Option<u64>| r.map_or("unlimited".to_owned(), |b| format!("{} MB/s", b / 1_000_000));
        format!(
            "{} per connection, {} in total, {} ms latency",
            rate(self.per_connection),
            rate(self.total),
            self.latency.as_millis()
        )
    }
}

/// What went through the registry since it started.
#[derive(Debug, Default)]
pub struct Traffic {
    pub connections: AtomicU64,
    /// Registry to clients.
    pub bytes_served: AtomicU64,
}

pub struct ThrottledRegistry {
    addr: SocketAddr,
    traffic: Arc<Traffic>,
    accepting: JoinHandle<()>,
}

impl ThrottledRegistry {
    /// Listens on `listen` and relays every connection to `upstream` at `throttle`.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr, throttle: Throttle) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let traffic = Arc::new(Traffic::default());
        let total = throttle.total.map(|rate| Arc::new(Mutex::new(Bucket::new(rate))));
        let counted = traffic.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counted.connections.fetch_add(1, Ordering::Relaxed);
                let (counted, total) = (counted.clone(), total.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(throttle.latency).await;
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    // Small requests must not wait for more bytes (Nagle) on top of the latency.
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let own = throttle
                        .per_connection
                        .map(|rate| Arc::new(Mutex::new(Bucket::new(rate))));
                    tokio::join!(
                        delayed(client_read, server_write, throttle.latency),
                        limited(server_read, client_write, own, total, &counted),
                    );
                });
            }
        });
        Ok(Self {
            addr,
            traffic,
            accepting,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted and bytes served so far.
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.traffic.connections.load(Ordering::Relaxed),
            self.traffic.bytes_served.load(Ordering::Relaxed),
        )
    }
}

impl Drop for ThrottledRegistry {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// A token bucket: `rate` bytes per second, at most a tenth of a second's worth at once.
struct Bucket {
    rate: u64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u64) -> Self {
        Self {
            rate: rate.max(1),
            tokens: 0.0,
            at: Instant::now(),
        }
    }

    /// How long until `bytes` may go; takes them (the balance may go negative: later sends wait).
    fn take(&mut self, bytes: usize) -> Duration {
        let now = Instant::now();
        let burst = self.rate as f64 / 10.0;
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate as f64).min(burst);
        self.at = now;
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate as f64)
        }
    }
}

async fn wait_for(bucket: &Option<Arc<Mutex<Bucket>>>, bytes: usize) {
    if let Some(bucket) = bucket {
        let wait = bucket.lock().await.take(bytes);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Registry to client, each chunk after both buckets allow it.
async fn limited(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    own: Option<Arc<Mutex<Bucket>>>,
    total: Option<Arc<Mutex<Bucket>>>,
    traffic: &Traffic,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        wait_for(&own, read).await;
        wait_for(&total, read).await;
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        traffic.bytes_served.fetch_add(read as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}

/// Client to registry, each chunk `latency` after it was read, in order: a delay line (reading
/// goes on meanwhile, so the delay is added once per request, not once per chunk).
async fn delayed(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, latency: Duration) {
    let (send, mut receive) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    if send.send((Instant::now() + latency, buffer[..read].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writing = async {
        while let Some((due, chunk)) = receive.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_rate_through() {
        let mut bucket = Bucket::new(1_000_000);
        // Empty at first: 100 kB waits a tenth of a second.
        let wait = bucket.take(100_000);
        assert!((wait.as_secs_f64() - 0.1).abs() < 0.01, "{wait:?}");
        // The next 100 kB waits behind it.
        let wait = bucket.take(100_000);
        assert!((wait.as_secs_f64() - 0.2).abs() < 0.01, "{wait:?}");
    }

    #[tokio::test]
    async fn serves_at_the_rate_set_after_the_latency() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = upstream.accept().await.unwrap();
            let mut request = [0u8; 1];
            socket.read_exact(&mut request).await.unwrap();
            socket.write_all(&vec![7u8; 1_000_000]).await.unwrap();
        });
        let throttle = Throttle {
            per_connection: Some(2_000_000),
            total: None,
            latency: Duration::from_millis(50),
        };
        let registry = ThrottledRegistry::start("127.0.0.1:0".parse().unwrap(), upstream_addr, throttle)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let mut client = TcpStream::connect(registry.addr()).await.unwrap();
        client.write_all(b"?").await.unwrap();
        let mut body = Vec::new();
        client.read_to_end(&mut body).await.unwrap();
        let took = started.elapsed();
        assert_eq!(body.len(), 1_000_000);
        // 0.5 s of bandwidth less at most 0.1 s of burst saved while idle, plus 0.1 s of latency
        // (connection and request).
        assert!(took >= Duration::from_millis(480), "{took:?}");
        assert!(took < Duration::from_millis(1200), "{took:?}");
        assert_eq!(registry.traffic(), (1, 1_000_000));
    }
}
