//! Receives through a shared receive queue (a linked-list RMP, as verbs
//! builds SRQs): WQEs are taken in list order, CQEs name the WQE index, and
//! freed WQEs relinked at the tail are used again.

#[path = "sim_datapath_support.rs"]
mod dp;

use devx::ProviderContext;
use dp::*;
use prm_layouts::*;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_srq {
    use super::*;

    const LOG_WQES: u8 = 3;
    const STRIDE: usize = 32;

    struct Srq {
        srqn: u32,
        ring: usize,
        dbr: usize,
        head: u16,
        tail: u16,
        counter: u16,
    }

    impl Srq {
        fn new(n: &Node) -> Srq {
            let wqes = 1usize << LOG_WQES;
            let (ring, ring_id) = n.umem(wqes * STRIDE);
            let (dbr, dbr_id) = n.umem(64);
            for i in 0..wqes {
                let next = ((i + 1) % wqes) as u16;
                // SAFETY: inside the registered ring.
                unsafe { *((ring + i * STRIDE + 2) as *mut [u8; 2]) = next.to_be_bytes() };
            }
            let mut m = CreateRmpIn::new();
            m.set_opcode(0x90c);
            let c = m.ctx_mut();
            c.set_state(1);
            let w = c.wq_mut();
            w.set_wq_type(0);
            w.set_pd(n.pd);
            w.set_log_wq_stride(5);
            w.set_log_wq_sz(LOG_WQES);
            w.set_dbr_umem_valid(1);
            w.set_wq_umem_valid(1);
            w.set_dbr_umem_id(dbr_id);
            w.set_wq_umem_id(ring_id);
            let mut out = vec![0u8; 16];
            n.ctx.create(m.as_bytes(), &mut out).unwrap();
            Srq {
                srqn: be32(&out, 8) & 0xff_ffff,
                ring,
                dbr,
                head: 0,
                tail: (wqes - 1) as u16,
                counter: 0,
            }
        }

        fn post(&mut self, key: u32, addr: u64, len: u32) {
            let at = self.ring + usize::from(self.head) * STRIDE;
            let seg = data_seg(len, key, addr);
            // SAFETY: inside the registered ring and doorbell record.
            unsafe {
                std::ptr::copy_nonoverlapping(seg.as_ptr(), (at + 16) as *mut u8, 16);
                self.head = u16::from_be_bytes(*((at + 2) as *const [u8; 2]));
                self.counter = self.counter.wrapping_add(1);
                *(self.dbr as *mut [u8; 4]) = u32::from(self.counter).to_be_bytes();
            }
        }

        /// Relinks a consumed WQE at the tail, as rdma-core's free does.
        fn free(&mut self, index: u16) {
            let at = self.ring + usize::from(self.tail) * STRIDE;
            // SAFETY: inside the registered ring.
            unsafe { *((at + 2) as *mut [u8; 2]) = index.to_be_bytes() };
            self.tail = index;
        }
    }

    fn qp_on_srq(n: &Node, cq: &Cq, srqn: u32) -> Qp {
        n.qp_on(RC, cq, Some(srqn))
    }

    #[test]
    fn sends_land_in_srq_wqes_in_list_order() {
        let n = Node::new(1140);
        let mut srq = Srq::new(&n);
        let cq_b = n.cq(6);
        let b1 = qp_on_srq(&n, &cq_b, srq.srqn);
        let b2 = qp_on_srq(&n, &cq_b, srq.srqn);
        let mut cq_b = cq_b;
        let cq_a = n.cq(6);
        let mut a1 = n.qp(RC, &cq_a);
        let mut a2 = n.qp(RC, &cq_a);
        n.connect(&a1, b1.qpn, [0; 16], 7);
        n.connect(&b1, a1.qpn, [0; 16], 7);
        n.connect(&a2, b2.qpn, [0; 16], 7);
        n.connect(&b2, a2.qpn, [0; 16], 7);
        let dst = n.mr(64 * 32, ALL);
        let src = n.mr(64, ALL);
        for i in 0..7u64 {
            srq.post(dst.key, dst.addr() + i * 64, 64);
        }
        // Twenty sends through a 7-WQE list: consumed WQEs are freed and reposted.
        for (i, slot) in (0..20u8).zip(7u64..) {
            src.mem.write(0, &[i; 16]);
            let qp = if i % 2 == 0 { &mut a1 } else { &mut a2 };
            qp.post(SEND, 0, [0; 4], &[&data_seg(16, src.key, src.addr())]);
            let c = cq_b.poll().expect("receive CQE");
            assert_eq!(c.opcode, 2);
            assert_eq!(c.qpn, if i % 2 == 0 { b1.qpn } else { b2.qpn });
            let index = c.wqe_counter;
            assert!(usize::from(index) < 1 << LOG_WQES);
            // The WQE named by the CQE holds the buffer the data went to.
            let seg = {
                let mut b = [0u8; 16];
                // SAFETY: inside the registered ring.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (srq.ring + usize::from(index) * STRIDE + 16) as *const u8,
                        b.as_mut_ptr(),
                        16,
                    )
                };
                b
            };
            let addr = u64::from_be_bytes(seg[8..16].try_into().unwrap());
            let off = (addr - dst.addr()) as usize;
            assert_eq!(dst.mem.read(off, 16), [i; 16]);
            srq.free(index);
            srq.post(dst.key, dst.addr() + (slot % 32) * 64, 64);
        }
    }
}
