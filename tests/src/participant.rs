//! What a participant does with a stack: connect to `node_public_ip:node_port` and read what
//! the challenge says, as `nc` or a browser would.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Longest a participant's connection attempt or read may take here (everything is local).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// `node_public_ip:ports[0].node_port` of a Stack or status answer.
pub fn address_of(stack: &Value) -> Option<SocketAddr> {
    port_address(stack, 0)
}

/// `node_public_ip:ports[i].node_port` of a Stack or status answer.
pub fn port_address(stack: &Value, i: usize) -> Option<SocketAddr> {
    let ip = stack["node_public_ip"].as_str()?;
    let port = stack["ports"][i]["node_port"].as_u64()?;
    format!("{ip}:{port}").parse().ok()
}

/// Connects and reads until the challenge closes the connection (or 64 KiB, or the timeout):
/// the lines it says on connect.
pub async fn read_all(address: SocketAddr) -> std::io::Result<String> {
    read_all_within(address, IO_TIMEOUT).await
}

/// [`read_all`] for a challenge that takes up to `within` to say everything (one that probes
/// the network before answering).
pub async fn read_all_within(address: SocketAddr, within: Duration) -> std::io::Result<String> {
    let mut stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let mut text = Vec::new();
    let read = async {
        let mut buffer = [0u8; 4096];
        loop {
            let n = stream.read(&mut buffer).await?;
            if n == 0 || text.len() > 64 * 1024 {
                return Ok::<(), std::io::Error>(());
            }
            text.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(within, read)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// `GET path` over HTTP/1.0: the status code and the body.
pub async fn http_get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(IO_TIMEOUT, stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not HTTP: {response:?}")))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    Ok((status, body))
}

/// How long until a connection to `address` fails (the stack is gone), polling every 100 ms;
/// `None` if it still answers after `within`.
pub async fn time_until_refused(address: SocketAddr, within: Duration) -> Option<Duration> {
    time_until_answering(address, within, false).await
}

/// How long until `address` answers after all, polling every 100 ms; `None` if it is still
/// refused after `within`.
pub async fn time_until_answered(address: SocketAddr, within: Duration) -> Option<Duration> {
    time_until_answering(address, within, true).await
}

async fn time_until_answering(address: SocketAddr, within: Duration, answering: bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if read_all(address).await.is_ok() == answering {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// How long a UDP participant waits for an answer before sending again, as one pressing enter
/// again in `nc -u` does.
const UDP_RESEND_AFTER: Duration = Duration::from_millis(500);

/// A UDP participant: from one socket, sends a line to `address` and again every
/// [`UDP_RESEND_AFTER`] until a datagram comes back or `within` ends. The answer and how many
/// lines it took.
pub async fn udp_exchange(address: SocketAddr, within: Duration) -> std::io::Result<(String, u32)> {
    UdpParticipant::connect(address).await?.exchange(within).await
}

/// A participant's `nc -u`: one socket, kept for as long as the participant keeps it open.
pub struct UdpParticipant {
    socket: UdpSocket,
}

impl UdpParticipant {
    pub async fn connect(address: SocketAddr) -> std::io::Result<Self> {
        let socket = UdpSocket::bind("0.0.0.0:0").await?;
        socket.connect(address).await?;
        Ok(Self { socket })
    }

    /// Sends a line and again every [`UDP_RESEND_AFTER`] until a datagram comes back or
    /// `within` ends: the answer and how many lines it took.
    pub async fn exchange(&self, within: Duration) -> std::io::Result<(String, u32)> {
        let started = Instant::now();
        let mut sent = 0;
        let mut buffer = [0u8; 2048];
        while started.elapsed() < within {
            let resend_at = tokio::time::Instant::now() + UDP_RESEND_AFTER;
            // A refusal (an earlier datagram's ICMP port unreachable, reported on this send or
            // the receive) is silence too: nothing listens yet, or any more.
            match self.socket.send(b"hello\n").await {
                Err(e) if e.kind() != std::io::ErrorKind::ConnectionRefused => return Err(e),
                _ => sent += 1,
            }
            if let Ok(Ok(n)) = tokio::time::timeout_at(resend_at, self.socket.recv(&mut buffer)).await {
                return Ok((String::from_utf8_lossy(&buffer[..n]).into_owned(), sent));
            }
            tokio::time::sleep_until(resend_at).await;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer to {sent} datagrams in {within:?}"),
        ))
    }
}

/// How long until `address` no longer answers a datagram (the stack is gone), each try a new
/// participant (a new socket); `None` if it still answers after `within`.
pub async fn udp_time_until_silent(address: SocketAddr, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if udp_exchange(address, UDP_RESEND_AFTER).await.is_err() {
            return Some(started.elapsed());
        }
    }
    None
}

/// The `Name:\tvalue` fields the challenge banner prints from `/proc/self/status`.
pub fn status_field<'a>(banner: &'a str, name: &str) -> Option<&'a str> {
    banner
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether the capability `bit` is in the hexadecimal capability set `set` (`CapEff`).
pub fn has_capability(set: &str, bit: u32) -> bool {
    u64::from_str_radix(set, 16).is_ok_and(|caps| caps & (1 << bit) != 0)
}

/// `CAP_NET_RAW`'s bit (`linux/capability.h`).
pub const CAP_NET_RAW: u32 = 13;
/// `CAP_NET_BIND_SERVICE`'s bit.
pub const CAP_NET_BIND_SERVICE: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_banners_status_fields_and_capabilities() {
        let banner = "stack-env challenge on stack-00 as uid 0\nCapEff:\t00000000a80405fb\nNoNewPrivs:\t1\nSeccomp:\t2\ntoken: absent\n";
        assert_eq!(status_field(banner, "Seccomp"), Some("2"));
        assert_eq!(status_field(banner, "NoNewPrivs"), Some("1"));
        assert_eq!(status_field(banner, "token"), Some("absent"));
        let caps = status_field(banner, "CapEff").unwrap();
        // containerd's default set without NET_RAW.
        assert!(!has_capability(caps, CAP_NET_RAW));
        assert!(has_capability(caps, CAP_NET_BIND_SERVICE));
        assert!(has_capability("00000000a80425fb", CAP_NET_RAW));
    }

    #[tokio::test]
    async fn a_udp_participant_reads_the_answer_and_resends_to_silence_at_its_pace() {
        let challenge = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = challenge.local_addr().unwrap();
        let answering = tokio::spawn(async move {
            let mut buffer = [0u8; 64];
            let (_, from) = challenge.recv_from(&mut buffer).await.unwrap();
            challenge.send_to(b"flag: CTF{x}\n", from).await.unwrap();
        });
        let answer = udp_exchange(address, Duration::from_secs(2)).await.unwrap();
        assert_eq!(answer, ("flag: CTF{x}\n".to_owned(), 1));
        answering.await.unwrap();

        // Nothing listens there any more: each refusal waits its turn, no flood of datagrams.
        let silence = udp_exchange(address, Duration::from_millis(1200)).await.unwrap_err();
        assert_eq!(silence.to_string(), "no answer to 3 datagrams in 1.2s");
        assert!(udp_time_until_silent(address, Duration::from_secs(2)).await.is_some());
    }
}
