//! W3C trace context stored with a job, so the span that runs it can link
//! back to the span that enqueued it.
//!
//! Capture and linking go through `tracing-opentelemetry` and need the
//! `opentelemetry` cargo feature (on by default in the `jq` facade); without
//! it a job still carries whatever context it was given, and backends store
//! it all the same.

use std::fmt;

use crate::error::{Error, Result};

/// The W3C `traceparent` and `tracestate` of the span a job was enqueued
/// from. Stored with the job by every backend and kept by retries, so each
/// run of the job can link to the request that asked for it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// `traceparent`, then a space and `tracestate` when there is one: the
    /// one text column (or hash field) backends store. A `traceparent` never
    /// contains a space.
    stored: String,
}

impl TraceContext {
    /// A context from the two W3C headers; `traceparent` must be
    /// `version-traceid-parentid-flags` in lowercase hex (55 bytes for
    /// version `00`), `tracestate` is kept as given (empty means none).
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self> {
        check_traceparent(traceparent)
            .map_err(|reason| Error::invalid("traceparent", format!("{traceparent:?}: {reason}")))?;
        if tracestate.is_some_and(|s| s.chars().any(char::is_control)) {
            return Err(Error::invalid("tracestate", "it has a control character"));
        }
        let stored = match tracestate.map(str::trim).filter(|s| !s.is_empty()) {
            Some(state) => format!("{traceparent} {state}"),
            None => traceparent.to_owned(),
        };
        Ok(TraceContext { stored })
    }

    /// Wraps the text a backend stored ([`TraceContext::as_stored`]) without
    /// checking it: a context that does not parse is simply not linked.
    pub fn from_stored(stored: String) -> Self {
        TraceContext { stored }
    }

    /// The text backends store.
    pub fn as_stored(&self) -> &str {
        &self.stored
    }

    /// The `traceparent` header.
    pub fn traceparent(&self) -> &str {
        self.stored.split_once(' ').map_or(self.stored.as_str(), |(parent, _)| parent)
    }

    /// The `tracestate` header, if there is one.
    pub fn tracestate(&self) -> Option<&str> {
        self.stored.split_once(' ').map(|(_, state)| state)
    }

    /// The trace id: 32 lowercase hex digits (`None` when the stored
    /// context is malformed).
    pub fn trace_id(&self) -> Option<&str> {
        let parent = self.traceparent();
        check_traceparent(parent).ok().map(|()| &parent[3..35])
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TraceContext").field(&self.stored).finish()
    }
}

/// `00-<32 hex>-<16 hex>-<2 hex>` (later versions may append fields).
fn check_traceparent(parent: &str) -> std::result::Result<(), &'static str> {
    let bytes = parent.as_bytes();
    if bytes.len() < 55 || (bytes.len() > 55 && bytes[55] != b'-') {
        return Err("not version-traceid-parentid-flags");
    }
    let hex = |range: std::ops::Range<usize>| bytes[range].iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return Err("not version-traceid-parentid-flags");
    }
    if !hex(0..2) || !hex(3..35) || !hex(36..52) || !hex(53..55) {
        return Err("not lowercase hex");
    }
    if &parent[0..2] == "ff" || bytes[3..35].iter().all(|b| *b == b'0') || bytes[36..52].iter().all(|b| *b == b'0') {
        return Err("an invalid version, trace id or parent id");
    }
    Ok(())
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use std::str::FromStr;

    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceContext;

    impl TraceContext {
        /// The context of the current `tracing` span, when a
        /// `tracing-opentelemetry` layer gives it a valid one.
        pub fn current() -> Option<Self> {
            let span = tracing::Span::current();
            if span.is_none() {
                return None;
            }
            Self::of(&span.context().span().span_context().clone())
        }

        /// The W3C form of an OpenTelemetry span context (`None` when it is
        /// not valid).
        pub fn of(cx: &SpanContext) -> Option<Self> {
            if !cx.is_valid() {
                return None;
            }
            let parent = format!("00-{}-{}-{:02x}", cx.trace_id(), cx.span_id(), cx.trace_flags().to_u8());
            let state = cx.trace_state().header();
            let stored = if state.is_empty() { parent } else { format!("{parent} {state}") };
            Some(TraceContext { stored })
        }

        /// The remote span context to link to (`None` when the stored
        /// context does not parse).
        pub fn span_context(&self) -> Option<SpanContext> {
            let parent = self.traceparent();
            super::check_traceparent(parent).ok()?;
            let trace_id = TraceId::from_hex(&parent[3..35]).ok()?;
            let span_id = SpanId::from_hex(&parent[36..52]).ok()?;
            let flags = TraceFlags::new(u8::from_str_radix(&parent[53..55], 16).ok()?);
            let state = self.tracestate().and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
            Some(SpanContext::new(trace_id, span_id, flags, true, state))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn headers_round_trip_through_the_stored_text() {
        let cx = TraceContext::new(PARENT, Some("congo=t61rcWkgMzE")).unwrap();
        let back = TraceContext::from_stored(cx.as_stored().to_owned());
        assert_eq!(back.traceparent(), PARENT);
        assert_eq!(back.tracestate(), Some("congo=t61rcWkgMzE"));
        assert_eq!(back.trace_id(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!(TraceContext::new(PARENT, None).unwrap().tracestate(), None);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in ["", "00-xyz", &PARENT.to_uppercase(), "00-00000000000000000000000000000000-00f067aa0ba902b7-01"] {
            assert!(matches!(TraceContext::new(bad, None), Err(Error::InvalidInput { .. })), "{bad:?}");
        }
        assert_eq!(TraceContext::from_stored("garbage".into()).trace_id(), None);
    }

    #[cfg(feature = "opentelemetry")]
    #[test]
    fn span_context_round_trips() {
        let cx = TraceContext::new(PARENT, Some("a=b")).unwrap();
        let span = cx.span_context().unwrap();
        assert!(span.is_remote() && span.is_sampled());
        assert_eq!(TraceContext::of(&span).unwrap(), cx);
    }
}
