//! A write deadline for one API connection: a client that stops reading its response is
//! dropped instead of holding a connection (and the memory of the response) for ever.
//!
//! hyper has a timeout for reading request headers but none for writing. The clock starts
//! when a write first finds the socket full and stops when everything hyper queued has
//! reached the kernel (its `poll_flush`), so a client that drains a few bytes now and then
//! cannot stretch one response past the deadline either.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose writes fail with `TimedOut` once the peer has kept them blocked for
/// `timeout`.
pub(crate) struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Running while a response is stuck in our buffers.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        WriteDeadline {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Called when the socket refused more bytes: starts the clock, or fails once it ran out.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        // Polling registers the waker: the task is woken at the deadline even when the
        // client never reads again.
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing of its response for {timeout:?}"),
            )),
            Poll::Pending => Ok(()),
        }
    }

    fn pending_write<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.check_stall(cx) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending_write(cx),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending_write(cx),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending_write(cx),
            Poll::Ready(result) => {
                // hyper flushes once its whole queue is written: the response got out.
                self.stalled = None;
                Poll::Ready(result)
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Pending => self.pending_write(cx),
            ready => ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that never reads: writes fill the socket buffer, then time out.
    #[tokio::test]
    async fn a_peer_that_stops_reading_times_the_writer_out() {
        let (ours, mut theirs) = tokio::net::UnixStream::pair().expect("socketpair");
        let mut stream = WriteDeadline::new(ours, Duration::from_millis(200));
        let chunk = vec![0u8; 64 * 1024];
        let started = tokio::time::Instant::now();
        let err = loop {
            match stream.write_all(&chunk).await {
                Ok(()) => assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the socket buffer never filled"
                ),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        // The peer is still there: what it had queued is readable.
        let mut first = [0u8; 16];
        theirs.read_exact(&mut first).await.expect("read");
    }

    /// A peer that reads keeps the connection: a flush that completes resets the clock, so
    /// responses written over a long connection never add up to a timeout.
    #[tokio::test]
    async fn a_reading_peer_is_never_timed_out() {
        let (ours, mut theirs) = tokio::net::UnixStream::pair().expect("socketpair");
        let mut stream = WriteDeadline::new(ours, Duration::from_millis(100));
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            theirs.read_to_end(&mut sink).await.expect("read");
            sink.len()
        });
        let chunk = vec![7u8; 256 * 1024];
        for _ in 0..8 {
            stream.write_all(&chunk).await.expect("write");
            stream.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        stream.shutdown().await.expect("shutdown");
        drop(stream);
        assert_eq!(reader.await.expect("reader"), 8 * 256 * 1024);
    }
}
