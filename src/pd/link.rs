//! One JSON line per message over a loopback TCP stream, read without
//! blocking: a worker loop polls its links between engine steps and never
//! waits on a peer while its engine has work.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A non-blocking JSON-lines link to one peer.
pub struct Link {
    stream: TcpStream,
    /// Bytes read but not yet a whole line.
    buf: Vec<u8>,
    /// The peer closed its end (or the stream failed).
    pub closed: bool,
}

impl Link {
    /// Wraps a connected stream (non-blocking, no Nagle delay).
    ///
    /// Errors: the socket options cannot be set.
    pub fn new(stream: TcpStream) -> Result<Link> {
        stream.set_nonblocking(true).context("a P/D link: non-blocking mode")?;
        stream.set_nodelay(true).context("a P/D link: TCP_NODELAY")?;
        Ok(Link { stream, buf: Vec::new(), closed: false })
    }

    /// Sends one message as a JSON line, waiting while the socket's buffer
    /// is full (a whole prompt is a few KB; the peer reads between steps).
    ///
    /// Errors: the peer is gone; the link is then `closed`.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let mut line = serde_json::to_vec(msg).expect("P/D messages serialise");
        line.push(b'\n');
        let mut sent = 0;
        while sent < line.len() {
            match self.stream.write(&line[sent..]) {
                Ok(0) => return Err(self.fail(std::io::Error::from(ErrorKind::WriteZero))),
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait(&[self.fd()], libc::POLLOUT, Duration::from_millis(10)),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        Ok(())
    }

    fn fail(&mut self, e: std::io::Error) -> anyhow::Error {
        self.closed = true;
        anyhow::Error::new(e).context("the P/D peer is gone")
    }

    /// Every whole message the peer has sent so far (none when nothing
    /// came); at end of stream the link becomes `closed`.
    ///
    /// Errors: a line that is not a message (names the line).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Vec<T>> {
        let mut chunk = [0u8; 64 * 1024];
        while !self.closed {
            match self.stream.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.closed = true,
            }
        }
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(end) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let line = &self.buf[start..start + end];
            out.push(serde_json::from_slice(line).with_context(|| format!("a P/D message that is not one: {}", String::from_utf8_lossy(line)))?);
            start += end + 1;
        }
        self.buf.drain(..start);
        Ok(out)
    }

    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

/// Waits until one of `fds` is ready for `events` (POLLIN, POLLOUT) or
/// `timeout` passes; an error of poll(2) is a plain return (callers re-check).
pub fn wait(fds: &[RawFd], events: libc::c_short, timeout: Duration) {
    let mut polls: Vec<libc::pollfd> = fds.iter().map(|&fd| libc::pollfd { fd, events, revents: 0 }).collect();
    // SAFETY: `polls` is a live array of `polls.len()` pollfd entries.
    unsafe {
        libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout.as_millis().min(i32::MAX as u128) as libc::c_int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::pd::{FromPrefill, PrefillDone, ToPrefill};

    #[test]
    fn lines_cross_whole_and_a_closed_peer_is_seen() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        let (mut a, mut b) = (Link::new(a).unwrap(), Link::new(b).unwrap());
        assert!(b.recv::<ToPrefill>().unwrap().is_empty());
        let prompt: Vec<u32> = (0..50_000).collect();
        a.send(&ToPrefill::Add { rid: 7, prompt: prompt.clone() }).unwrap();
        a.send(&ToPrefill::Add { rid: 8, prompt: vec![1] }).unwrap();
        let mut got = Vec::new();
        for _ in 0..200 {
            got.extend(b.recv::<ToPrefill>().unwrap());
            if got.len() == 2 {
                break;
            }
            wait(&[b.fd()], libc::POLLIN, Duration::from_millis(10));
        }
        match &got[..] {
            [ToPrefill::Add { rid: 7, prompt: p }, ToPrefill::Add { rid: 8, .. }] => assert_eq!(p, &prompt),
            other => panic!("{other:?}"),
        }
        b.send(&FromPrefill::Done(PrefillDone { rid: 7, ..PrefillDone::default() })).unwrap();
        drop(b);
        let mut back = Vec::new();
        for _ in 0..200 {
            back.extend(a.recv::<FromPrefill>().unwrap());
            if a.closed {
                break;
            }
            wait(&[a.fd()], libc::POLLIN, Duration::from_millis(10));
        }
        assert!(a.closed);
        assert!(matches!(&back[..], [FromPrefill::Done(PrefillDone { rid: 7, .. })]), "{back:?}");
    }
}
