//! The gateway's bodies: a request's as sent upstream (buffered, so it can
//! go to another endpoint, or streamed once), a response's as sent to the
//! client (made here, or an engine's with its accounting), and the guards
//! that count a request in flight until its response ends. [`scan`] reads a
//! JSON body's top-level fields without parsing it.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Limited;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use prometheus_client::metrics::gauge::Gauge;

use crate::table::Endpoint;

pub mod scan;

pub use scan::{ScanError, as_str, top_level_fields};

/// Counts a request in the gateway's in-flight gauge until its response
/// ends.
pub(crate) struct InFlight(Gauge);

impl InFlight {
    pub(crate) fn new(gauge: &Gauge) -> InFlight {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Counts a request as in flight to an endpoint until dropped.
pub(crate) struct Outstanding(Arc<Endpoint>);

impl Outstanding {
    pub(crate) fn new(endpoint: &Arc<Endpoint>) -> Outstanding {
        endpoint.state.outstanding.fetch_add(1, Ordering::Relaxed);
        Outstanding(endpoint.clone())
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.state.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client's request body, whatever connection it came on.
pub type RequestBody = UnsyncBoxBody<Bytes, ClientBodyError>;

/// Why a client's request body could not be read. A concrete type, not a
/// boxed error, so futures holding a [`RequestBody`] are `Send` to rustc.
#[derive(Debug)]
pub struct ClientBodyError(pub BodyError);

impl std::fmt::Display for ClientBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ClientBodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

type StreamedRequest = Limited<RequestBody>;

/// A request body as sent upstream: buffered (a `/v1` body that was read for
/// its model, or a small one under a service prefix; cheap to resend) or
/// streamed from the client, held in a slot until the upstream connection
/// first asks for it.
pub struct UpstreamBody {
    pub(crate) inner: UpstreamInner,
}

pub(crate) enum UpstreamInner {
    Buffered(Option<Bytes>, usize),
    Streaming {
        slot: Arc<Mutex<Option<StreamedRequest>>>,
        taken: Option<StreamedRequest>,
        size: SizeHint,
    },
}

impl UpstreamBody {
    pub(crate) fn buffered(bytes: Bytes) -> UpstreamBody {
        let len = bytes.len();
        UpstreamBody {
            inner: UpstreamInner::Buffered(Some(bytes), len),
        }
    }

    pub(crate) fn streaming(body: StreamedRequest) -> UpstreamBody {
        let size = body.size_hint();
        UpstreamBody {
            inner: UpstreamInner::Streaming {
                slot: Arc::new(Mutex::new(Some(body))),
                taken: None,
                size,
            },
        }
    }

    /// Empty (health checks).
    pub(crate) fn empty() -> UpstreamBody {
        UpstreamBody::buffered(Bytes::new())
    }

    /// The body for one attempt.
    pub(crate) fn attempt(&self) -> UpstreamBody {
        let inner = match &self.inner {
            UpstreamInner::Buffered(bytes, len) => UpstreamInner::Buffered(bytes.clone(), *len),
            UpstreamInner::Streaming { slot, size, .. } => UpstreamInner::Streaming {
                slot: slot.clone(),
                taken: None,
                size: *size,
            },
        };
        UpstreamBody { inner }
    }

    /// Whether another attempt could still send the whole body.
    pub(crate) fn retryable(&self) -> bool {
        match &self.inner {
            UpstreamInner::Buffered(..) => true,
            UpstreamInner::Streaming { slot, .. } => {
                slot.lock().map(|s| s.is_some()).unwrap_or(false)
            }
        }
    }

    pub(crate) fn sent_bytes(&self) -> Option<u64> {
        match &self.inner {
            UpstreamInner::Buffered(_, len) => Some(*len as u64),
            UpstreamInner::Streaming { size, .. } => size.exact(),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.get_mut().inner {
            UpstreamInner::Buffered(bytes, _) => Poll::Ready(
                bytes
                    .take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            UpstreamInner::Streaming { slot, taken, .. } => {
                if taken.is_none() {
                    *taken = slot.lock().ok().and_then(|mut s| s.take());
                }
                match taken {
                    Some(body) => Pin::new(body).poll_frame(cx),
                    None => Poll::Ready(Some(Err(
                        "the request body was already sent to another endpoint".into(),
                    ))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            UpstreamInner::Buffered(bytes, _) => bytes.as_ref().is_none_or(Bytes::is_empty),
            UpstreamInner::Streaming { taken, size, .. } => match taken {
                Some(body) => body.is_end_stream(),
                None => size.exact() == Some(0),
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            UpstreamInner::Buffered(bytes, _) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            UpstreamInner::Streaming { size, .. } => *size,
        }
    }
}

/// A response body as sent to the client.
pub enum GatewayBody {
    /// Made by the gateway.
    Full(Option<Bytes>),
    /// An engine's, forwarded frame by frame as it arrives.
    Proxied(Box<Tracked>),
}

impl GatewayBody {
    pub(crate) fn full(body: impl Into<Bytes>) -> GatewayBody {
        GatewayBody::Full(Some(body.into()))
    }
}

impl From<Bytes> for GatewayBody {
    fn from(bytes: Bytes) -> Self {
        GatewayBody::Full(Some(bytes))
    }
}

/// Why a body stopped: the engine's connection failed, or it went silent.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            GatewayBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Proxied(tracked) => Pin::new(tracked.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Full(bytes) => bytes.is_none(),
            GatewayBody::Proxied(tracked) => tracked.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            GatewayBody::Proxied(tracked) => tracked.inner.size_hint(),
        }
    }
}

/// An engine's response body with its accounting: time to first byte,
/// bytes, and the request's place in flight, released when the body ends or
/// the client goes away (dropping it also drops the upstream request).
pub struct Tracked {
    pub(crate) inner: Incoming,
    /// Fires when the engine sends nothing for the idle timeout; armed only
    /// once the engine makes the client wait (most answers never do).
    pub(crate) idle: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Data arrived since the timer was last set.
    pub(crate) fresh: bool,
    pub(crate) idle_timeout: Duration,
    pub(crate) metrics: Arc<crate::metrics::ServiceMetrics>,
    pub(crate) started: Instant,
    pub(crate) first_byte: bool,
    pub(crate) bytes: u64,
    pub(crate) _outstanding: Outstanding,
    pub(crate) _in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if polled.is_pending() {
            let this = self.as_mut().get_mut();
            let deadline = || tokio::time::Instant::now() + this.idle_timeout;
            let idle = match &mut this.idle {
                Some(idle) if this.fresh => {
                    idle.as_mut().reset(deadline());
                    idle
                }
                Some(idle) => idle,
                None => this
                    .idle
                    .insert(Box::pin(tokio::time::sleep_until(deadline()))),
            };
            this.fresh = false;
            // Silence: the stream ends in an error (the client's connection
            // is cut, so a cut answer never looks complete).
            return match idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "the engine sent nothing for {:?}",
                    this.idle_timeout
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            };
        }
        self.fresh = true;
        let polled = polled.map(|frame| frame.map(|f| f.map_err(BodyError::from)));
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let this = self.as_mut().get_mut();
            if !this.first_byte {
                this.first_byte = true;
                this.metrics
                    .time_to_first_byte
                    .observe(this.started.elapsed().as_secs_f64());
            }
            this.bytes += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.metrics.response_bytes.inc_by(self.bytes);
        }
    }
}
