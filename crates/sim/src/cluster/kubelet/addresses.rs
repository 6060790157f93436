//! Pods' loopback addresses: each pod serves on its own 127.x.y.z, held
//! (bound, not listening) from the moment it is given until the pod goes,
//! so another process on this machine handing out the same range skips it.
//! The counter is the fleet's ([`Addresses`]), shared by its clusters.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The addresses a fleet's pods are given, in turn from 127.1.0.1: one per
/// fleet, cloned into each of its clusters' kubelets.
#[derive(Clone, Debug, Default)]
pub struct Addresses(Arc<AtomicU32>);

impl Addresses {
    /// The next free address whose `port` nothing holds, held.
    pub(super) fn next(&self, port: u16) -> Result<Address, NoAddress> {
        next_address(&self.0, port)
    }
}

/// Pods' addresses: 127.1.0.0 to 127.254.255.255, handed out in turn.
pub(super) const FIRST_ADDRESS: u32 = 0x7f01_0000;
pub(super) const ADDRESSES: u32 = 254 << 16;
/// An address never handed out: if its port is taken too, something
/// listens on that port on every address (`0.0.0.0:8000`).
pub(super) const PROBE_ADDRESS: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 254);
/// A pod's loopback address, held for as long as the pod runs here.
#[derive(Debug)]
pub(super) struct Address {
    pub(super) ip: Ipv4Addr,
    /// The engine port, bound but not listening: another process on this
    /// machine (a second `modelplane up`, a test's second simulator) hands
    /// out addresses from the same range, and must see this one taken while
    /// the engine pulls, starts, loads or backs off. Unlike a listener it
    /// refuses connections, as a pod with no engine listening does.
    _held: tokio::net::TcpSocket,
}
/// Why no address could be held for a pod.
#[derive(Debug)]
pub(super) enum NoAddress {
    /// Something listens on the port on every address.
    TakenEverywhere,
    /// The system refused a socket (too many open files, …).
    Refused(std::io::Error),
}
impl std::fmt::Display for NoAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAddress::TakenEverywhere => write!(
                f,
                "the engine port is taken on every loopback address; is another process on this machine listening on it?"
            ),
            NoAddress::Refused(e) => write!(f, "no loopback address for the engine: {e}"),
        }
    }
}
/// The next address of `counter`'s range whose port `port` nothing holds.
/// Taken ones (another process's pods and engines) are skipped, however
/// many; the search ends when the port is taken everywhere or the system
/// refuses a socket.
pub(super) fn next_address(counter: &AtomicU32, port: u16) -> Result<Address, NoAddress> {
    let mut probed = false;
    for _ in 0..ADDRESSES {
        let n = counter.fetch_add(1, Ordering::Relaxed) % ADDRESSES;
        let ip = Ipv4Addr::from(FIRST_ADDRESS + n);
        let octet = ip.octets()[3];
        if octet == 0 || octet == 255 {
            continue;
        }
        match hold(ip, port) {
            Ok(held) => return Ok(Address { ip, _held: held }),
            // Taken: another process's engine or pod is there, or a
            // listener on every address (asked once, at the first taken).
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if !probed && taken_everywhere(port).map_err(NoAddress::Refused)? {
                    return Err(NoAddress::TakenEverywhere);
                }
                probed = true;
            }
            Err(e) => return Err(NoAddress::Refused(e)),
        }
    }
    Err(NoAddress::TakenEverywhere)
}
/// Whether something listens on `port` on every address: then the probe
/// address, which no pod has, is taken too. The probe sets `SO_REUSEADDR`
/// before it binds, so two kubelets probing at once do not see each other.
pub(super) fn taken_everywhere(port: u16) -> std::io::Result<bool> {
    let probe = tokio::net::TcpSocket::new_v4()?;
    probe.set_reuseaddr(true)?;
    match probe.bind(SocketAddr::from((PROBE_ADDRESS, port))) {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(true),
        Err(e) => Err(e),
    }
}
/// Binds `ip:port` without `SO_REUSEADDR`, which fails while any socket
/// holds it, then sets the option so the engine's own listener (which
/// sets it too) may bind beside it.
pub(super) fn hold(ip: Ipv4Addr, port: u16) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((ip, port)))?;
    socket.set_reuseaddr(true)?;
    Ok(socket)
}
