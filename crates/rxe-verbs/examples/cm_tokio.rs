//! The RDMA CM from async code: two devices on loopback, a listener and a
//! client that connect with `.await` on their event channels, one SEND
//! over the connected RC QP, then a disconnect.
//!
//! ```text
//! cargo run -p rxe-verbs --example cm_tokio
//! ```
//!
//! The channels' futures are runtime-agnostic (they wake the task's
//! waker from the CM agent's thread); tokio is only this example's executor.

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use rxe_verbs::cm::{CmId, ConnParam, EventChannel, PortSpace, RdmaCmEvent};
use rxe_verbs::*;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn rc(cq: &Cq) -> QpInitAttr<'_> {
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    }
}

async fn event(ch: &EventChannel) -> Res<RdmaCmEvent> {
    Ok(tokio::time::timeout(Duration::from_secs(10), ch.next_event()).await?)
}

async fn completion(cq: &Cq) -> Res<WorkCompletion> {
    for _ in 0..10_000 {
        if let Some(wc) = cq.poll_one()? {
            return Ok(wc);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err("no completion within 10 s".into())
}

/// Connects a client on `client_ip` to a listener on `server:port`, sends
/// `msg` and returns what the server received.
pub async fn run(server: &str, client: &str, port: u16, msg: &[u8]) -> Res<Vec<u8>> {
    let sdev = Device::add(DeviceConfig::on_address(server.parse()?))?;
    let cdev = Device::add(DeviceConfig::on_address(client.parse()?))?;
    let got = exchange(&sdev, &cdev, server, client, port, msg).await;
    sdev.remove()?;
    cdev.remove()?;
    got
}

async fn exchange(
    sdev: &Device,
    cdev: &Device,
    server: &str,
    client: &str,
    port: u16,
    msg: &[u8],
) -> Res<Vec<u8>> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (spd, scq) = (sdev.alloc_pd()?, sdev.create_cq(16)?);
    let smr = spd.reg_mr_zeroed(4096, access)?;
    let (cpd, ccq) = (cdev.alloc_pd()?, cdev.create_cq(16)?);
    let cmr = cpd.reg_mr(msg.to_vec(), access)?;

    let sch = EventChannel::new();
    let listener = CmId::new(&sch, PortSpace::Tcp)?;
    listener.bind_addr(SocketAddr::new(server.parse()?, port))?;
    listener.listen(1)?;

    let cch = EventChannel::new();
    let id = CmId::new(&cch, PortSpace::Tcp)?;
    let dst = SocketAddr::new(server.parse()?, port);
    let src = SocketAddr::new(client.parse()?, 0);
    id.resolve_addr(Some(src), dst, Duration::from_secs(1))?;
    let RdmaCmEvent::AddrResolved { .. } = event(&cch).await? else {
        return Err("expected AddrResolved".into());
    };
    id.resolve_route(Duration::from_secs(1))?;
    let RdmaCmEvent::RouteResolved { .. } = event(&cch).await? else {
        return Err("expected RouteResolved".into());
    };
    let cqp = id.create_qp(&cpd, &rc(&ccq))?;
    id.connect(&ConnParam::default())?;

    // The server side, awaited in the same task.
    let RdmaCmEvent::ConnectRequest { id: child, .. } = event(&sch).await? else {
        return Err("expected ConnectRequest".into());
    };
    let sqp = child.create_qp(&spd, &rc(&scq))?;
    sqp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: [smr.sge(0, 4096)].into(),
    })?;
    child.accept(&ConnParam::default())?;
    let RdmaCmEvent::Established { .. } = event(&cch).await? else {
        return Err("client: expected Established".into());
    };
    let RdmaCmEvent::Established { .. } = event(&sch).await? else {
        return Err("server: expected Established".into());
    };

    cqp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send,
        data: SendData::Sges(vec![cmr.sge(0, msg.len() as u32)]),
        signaled: true,
        fence: false,
        solicited: false,
        ud: None,
    })?;
    let wc = completion(&scq).await?;
    if wc.status != WcStatus::Success {
        return Err(format!("receive completed with {:?}", wc.status).into());
    }
    let mut got = vec![0u8; wc.byte_len as usize];
    smr.read(0, &mut got)?;

    id.disconnect()?;
    let RdmaCmEvent::Disconnected { .. } = event(&cch).await? else {
        return Err("client: expected Disconnected".into());
    };
    let RdmaCmEvent::Disconnected { .. } = event(&sch).await? else {
        return Err("server: expected Disconnected".into());
    };
    Ok(got)
}

#[cfg_attr(test, allow(dead_code))]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let got = run("127.0.140.60", "127.0.140.61", 7174, b"hello over the CM").await?;
    println!("server received {:?}", String::from_utf8_lossy(&got));
    Ok(())
}
