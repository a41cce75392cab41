//! Wire enumerations: command opcodes and status, CQE/WQE opcodes, QP state
//! and service type, capability and general object types.
//!
//! Every enum has `from_raw` (returns `None` for unknown values, never
//! panics), `raw`, `name` and `Display`.

use core::fmt;

macro_rules! wire_enum {
    (
        $(#[$m:meta])*
        $name:ident : $repr:ident {
            $($(#[$vm:meta])* $var:ident = $val:literal => $s:literal,)*
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr($repr)]
        pub enum $name {
            $($(#[$vm])* #[doc = $s] $var = $val,)*
        }

        impl $name {
            /// Every known value, in numeric order of declaration.
            pub const ALL: &'static [Self] = &[$(Self::$var),*];

            /// The value for a raw wire number, `None` if unknown.
            #[must_use]
            pub const fn from_raw(v: $repr) -> Option<Self> {
                match v {
                    $($val => Some(Self::$var),)*
                    _ => None,
                }
            }

            /// The raw wire number.
            #[must_use]
            pub const fn raw(self) -> $repr {
                self as $repr
            }

            /// The PRM name, e.g. `CREATE_CQ`.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$var => $s,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl TryFrom<$repr> for $name {
            type Error = $repr;
            fn try_from(v: $repr) -> Result<Self, $repr> {
                Self::from_raw(v).ok_or(v)
            }
        }

        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v as $repr
            }
        }
    };
}

wire_enum! {
    /// Command opcodes (`MLX5_CMD_OP_*`).
    Opcode: u16 {
        QueryHcaCap = 0x100 => "QUERY_HCA_CAP",
        QueryAdapter = 0x101 => "QUERY_ADAPTER",
        InitHca = 0x102 => "INIT_HCA",
        TeardownHca = 0x103 => "TEARDOWN_HCA",
        EnableHca = 0x104 => "ENABLE_HCA",
        DisableHca = 0x105 => "DISABLE_HCA",
        QueryPages = 0x107 => "QUERY_PAGES",
        ManagePages = 0x108 => "MANAGE_PAGES",
        SetHcaCap = 0x109 => "SET_HCA_CAP",
        QueryIssi = 0x10a => "QUERY_ISSI",
        SetIssi = 0x10b => "SET_ISSI",
        SetDriverVersion = 0x10d => "SET_DRIVER_VERSION",
        QuerySfPartition = 0x111 => "QUERY_SF_PARTITION",
        AllocSf = 0x113 => "ALLOC_SF",
        DeallocSf = 0x114 => "DEALLOC_SF",
        SuspendVhca = 0x115 => "SUSPEND_VHCA",
        ResumeVhca = 0x116 => "RESUME_VHCA",
        QueryVhcaMigrationState = 0x117 => "QUERY_VHCA_MIGRATION_STATE",
        SaveVhcaState = 0x118 => "SAVE_VHCA_STATE",
        LoadVhcaState = 0x119 => "LOAD_VHCA_STATE",
        CreateMkey = 0x200 => "CREATE_MKEY",
        QueryMkey = 0x201 => "QUERY_MKEY",
        DestroyMkey = 0x202 => "DESTROY_MKEY",
        QuerySpecialContexts = 0x203 => "QUERY_SPECIAL_CONTEXTS",
        PageFaultResume = 0x204 => "PAGE_FAULT_RESUME",
        AllocMemic = 0x205 => "ALLOC_MEMIC",
        DeallocMemic = 0x206 => "DEALLOC_MEMIC",
        ModifyMemic = 0x207 => "MODIFY_MEMIC",
        CreateEq = 0x301 => "CREATE_EQ",
        DestroyEq = 0x302 => "DESTROY_EQ",
        QueryEq = 0x303 => "QUERY_EQ",
        GenEqe = 0x304 => "GEN_EQE",
        CreateCq = 0x400 => "CREATE_CQ",
        DestroyCq = 0x401 => "DESTROY_CQ",
        QueryCq = 0x402 => "QUERY_CQ",
        ModifyCq = 0x403 => "MODIFY_CQ",
        CreateQp = 0x500 => "CREATE_QP",
        DestroyQp = 0x501 => "DESTROY_QP",
        Rst2initQp = 0x502 => "RST2INIT_QP",
        Init2rtrQp = 0x503 => "INIT2RTR_QP",
        Rtr2rtsQp = 0x504 => "RTR2RTS_QP",
        Rts2rtsQp = 0x505 => "RTS2RTS_QP",
        Sqerr2rtsQp = 0x506 => "SQERR2RTS_QP",
        Qp2Err = 0x507 => "2ERR_QP",
        Qp2Rst = 0x50a => "2RST_QP",
        QueryQp = 0x50b => "QUERY_QP",
        SqdRtsQp = 0x50c => "SQD_RTS_QP",
        MadIfc = 0x50d => "MAD_IFC",
        Init2initQp = 0x50e => "INIT2INIT_QP",
        CreatePsv = 0x600 => "CREATE_PSV",
        DestroyPsv = 0x601 => "DESTROY_PSV",
        CreateSrq = 0x700 => "CREATE_SRQ",
        DestroySrq = 0x701 => "DESTROY_SRQ",
        QuerySrq = 0x702 => "QUERY_SRQ",
        ArmRq = 0x703 => "ARM_RQ",
        CreateXrcSrq = 0x705 => "CREATE_XRC_SRQ",
        DestroyXrcSrq = 0x706 => "DESTROY_XRC_SRQ",
        QueryXrcSrq = 0x707 => "QUERY_XRC_SRQ",
        ArmXrcSrq = 0x708 => "ARM_XRC_SRQ",
        CreateDct = 0x710 => "CREATE_DCT",
        DestroyDct = 0x711 => "DESTROY_DCT",
        DrainDct = 0x712 => "DRAIN_DCT",
        QueryDct = 0x713 => "QUERY_DCT",
        ArmDctForKeyViolation = 0x714 => "ARM_DCT_FOR_KEY_VIOLATION",
        CreateXrq = 0x717 => "CREATE_XRQ",
        DestroyXrq = 0x718 => "DESTROY_XRQ",
        QueryXrq = 0x719 => "QUERY_XRQ",
        ArmXrq = 0x71a => "ARM_XRQ",
        QueryXrqDcParamsEntry = 0x725 => "QUERY_XRQ_DC_PARAMS_ENTRY",
        SetXrqDcParamsEntry = 0x726 => "SET_XRQ_DC_PARAMS_ENTRY",
        QueryXrqErrorParams = 0x727 => "QUERY_XRQ_ERROR_PARAMS",
        ReleaseXrqError = 0x729 => "RELEASE_XRQ_ERROR",
        ModifyXrq = 0x72a => "MODIFY_XRQ",
        QueryEswFunctions = 0x740 => "QUERY_ESW_FUNCTIONS",
        QueryVportState = 0x750 => "QUERY_VPORT_STATE",
        ModifyVportState = 0x751 => "MODIFY_VPORT_STATE",
        QueryEswVportContext = 0x752 => "QUERY_ESW_VPORT_CONTEXT",
        ModifyEswVportContext = 0x753 => "MODIFY_ESW_VPORT_CONTEXT",
        QueryNicVportContext = 0x754 => "QUERY_NIC_VPORT_CONTEXT",
        ModifyNicVportContext = 0x755 => "MODIFY_NIC_VPORT_CONTEXT",
        QueryRoceAddress = 0x760 => "QUERY_ROCE_ADDRESS",
        SetRoceAddress = 0x761 => "SET_ROCE_ADDRESS",
        QueryHcaVportContext = 0x762 => "QUERY_HCA_VPORT_CONTEXT",
        ModifyHcaVportContext = 0x763 => "MODIFY_HCA_VPORT_CONTEXT",
        QueryHcaVportGid = 0x764 => "QUERY_HCA_VPORT_GID",
        QueryHcaVportPkey = 0x765 => "QUERY_HCA_VPORT_PKEY",
        QueryVnicEnv = 0x76f => "QUERY_VNIC_ENV",
        QueryVportCounter = 0x770 => "QUERY_VPORT_COUNTER",
        AllocQCounter = 0x771 => "ALLOC_Q_COUNTER",
        DeallocQCounter = 0x772 => "DEALLOC_Q_COUNTER",
        QueryQCounter = 0x773 => "QUERY_Q_COUNTER",
        SetMonitorCounter = 0x774 => "SET_MONITOR_COUNTER",
        ArmMonitorCounter = 0x775 => "ARM_MONITOR_COUNTER",
        SetPpRateLimit = 0x780 => "SET_PP_RATE_LIMIT",
        QueryRateLimit = 0x781 => "QUERY_RATE_LIMIT",
        CreateSchedulingElement = 0x782 => "CREATE_SCHEDULING_ELEMENT",
        DestroySchedulingElement = 0x783 => "DESTROY_SCHEDULING_ELEMENT",
        QuerySchedulingElement = 0x784 => "QUERY_SCHEDULING_ELEMENT",
        ModifySchedulingElement = 0x785 => "MODIFY_SCHEDULING_ELEMENT",
        CreateQosParaVport = 0x786 => "CREATE_QOS_PARA_VPORT",
        DestroyQosParaVport = 0x787 => "DESTROY_QOS_PARA_VPORT",
        AllocPd = 0x800 => "ALLOC_PD",
        DeallocPd = 0x801 => "DEALLOC_PD",
        AllocUar = 0x802 => "ALLOC_UAR",
        DeallocUar = 0x803 => "DEALLOC_UAR",
        ConfigIntModeration = 0x804 => "CONFIG_INT_MODERATION",
        AccessReg = 0x805 => "ACCESS_REG",
        AttachToMcg = 0x806 => "ATTACH_TO_MCG",
        DetachFromMcg = 0x807 => "DETACH_FROM_MCG",
        GetDroppedPacketLog = 0x80a => "GET_DROPPED_PACKET_LOG",
        QueryMadDemux = 0x80b => "QUERY_MAD_DEMUX",
        SetMadDemux = 0x80c => "SET_MAD_DEMUX",
        Nop = 0x80d => "NOP",
        AllocXrcd = 0x80e => "ALLOC_XRCD",
        DeallocXrcd = 0x80f => "DEALLOC_XRCD",
        AllocTransportDomain = 0x816 => "ALLOC_TRANSPORT_DOMAIN",
        DeallocTransportDomain = 0x817 => "DEALLOC_TRANSPORT_DOMAIN",
        QueryCongStatus = 0x822 => "QUERY_CONG_STATUS",
        ModifyCongStatus = 0x823 => "MODIFY_CONG_STATUS",
        QueryCongParams = 0x824 => "QUERY_CONG_PARAMS",
        ModifyCongParams = 0x825 => "MODIFY_CONG_PARAMS",
        QueryCongStatistics = 0x826 => "QUERY_CONG_STATISTICS",
        AddVxlanUdpDport = 0x827 => "ADD_VXLAN_UDP_DPORT",
        DeleteVxlanUdpDport = 0x828 => "DELETE_VXLAN_UDP_DPORT",
        SetL2TableEntry = 0x829 => "SET_L2_TABLE_ENTRY",
        QueryL2TableEntry = 0x82a => "QUERY_L2_TABLE_ENTRY",
        DeleteL2TableEntry = 0x82b => "DELETE_L2_TABLE_ENTRY",
        SetWolRol = 0x830 => "SET_WOL_ROL",
        QueryWolRol = 0x831 => "QUERY_WOL_ROL",
        CreateLag = 0x840 => "CREATE_LAG",
        ModifyLag = 0x841 => "MODIFY_LAG",
        QueryLag = 0x842 => "QUERY_LAG",
        DestroyLag = 0x843 => "DESTROY_LAG",
        CreateVportLag = 0x844 => "CREATE_VPORT_LAG",
        DestroyVportLag = 0x845 => "DESTROY_VPORT_LAG",
        CreateTir = 0x900 => "CREATE_TIR",
        ModifyTir = 0x901 => "MODIFY_TIR",
        DestroyTir = 0x902 => "DESTROY_TIR",
        QueryTir = 0x903 => "QUERY_TIR",
        CreateSq = 0x904 => "CREATE_SQ",
        ModifySq = 0x905 => "MODIFY_SQ",
        DestroySq = 0x906 => "DESTROY_SQ",
        QuerySq = 0x907 => "QUERY_SQ",
        CreateRq = 0x908 => "CREATE_RQ",
        ModifyRq = 0x909 => "MODIFY_RQ",
        DestroyRq = 0x90a => "DESTROY_RQ",
        QueryRq = 0x90b => "QUERY_RQ",
        CreateRmp = 0x90c => "CREATE_RMP",
        ModifyRmp = 0x90d => "MODIFY_RMP",
        DestroyRmp = 0x90e => "DESTROY_RMP",
        QueryRmp = 0x90f => "QUERY_RMP",
        SetDelayDropParams = 0x910 => "SET_DELAY_DROP_PARAMS",
        CreateTis = 0x912 => "CREATE_TIS",
        ModifyTis = 0x913 => "MODIFY_TIS",
        DestroyTis = 0x914 => "DESTROY_TIS",
        QueryTis = 0x915 => "QUERY_TIS",
        CreateRqt = 0x916 => "CREATE_RQT",
        ModifyRqt = 0x917 => "MODIFY_RQT",
        DestroyRqt = 0x918 => "DESTROY_RQT",
        QueryRqt = 0x919 => "QUERY_RQT",
        SetFlowTableRoot = 0x92f => "SET_FLOW_TABLE_ROOT",
        CreateFlowTable = 0x930 => "CREATE_FLOW_TABLE",
        DestroyFlowTable = 0x931 => "DESTROY_FLOW_TABLE",
        QueryFlowTable = 0x932 => "QUERY_FLOW_TABLE",
        CreateFlowGroup = 0x933 => "CREATE_FLOW_GROUP",
        DestroyFlowGroup = 0x934 => "DESTROY_FLOW_GROUP",
        QueryFlowGroup = 0x935 => "QUERY_FLOW_GROUP",
        SetFlowTableEntry = 0x936 => "SET_FLOW_TABLE_ENTRY",
        QueryFlowTableEntry = 0x937 => "QUERY_FLOW_TABLE_ENTRY",
        DeleteFlowTableEntry = 0x938 => "DELETE_FLOW_TABLE_ENTRY",
        AllocFlowCounter = 0x939 => "ALLOC_FLOW_COUNTER",
        DeallocFlowCounter = 0x93a => "DEALLOC_FLOW_COUNTER",
        QueryFlowCounter = 0x93b => "QUERY_FLOW_COUNTER",
        ModifyFlowTable = 0x93c => "MODIFY_FLOW_TABLE",
        AllocPacketReformatContext = 0x93d => "ALLOC_PACKET_REFORMAT_CONTEXT",
        DeallocPacketReformatContext = 0x93e => "DEALLOC_PACKET_REFORMAT_CONTEXT",
        QueryPacketReformatContext = 0x93f => "QUERY_PACKET_REFORMAT_CONTEXT",
        AllocModifyHeaderContext = 0x940 => "ALLOC_MODIFY_HEADER_CONTEXT",
        DeallocModifyHeaderContext = 0x941 => "DEALLOC_MODIFY_HEADER_CONTEXT",
        QueryModifyHeaderContext = 0x942 => "QUERY_MODIFY_HEADER_CONTEXT",
        FpgaCreateQp = 0x960 => "FPGA_CREATE_QP",
        FpgaModifyQp = 0x961 => "FPGA_MODIFY_QP",
        FpgaQueryQp = 0x962 => "FPGA_QUERY_QP",
        FpgaDestroyQp = 0x963 => "FPGA_DESTROY_QP",
        FpgaQueryQpCounters = 0x964 => "FPGA_QUERY_QP_COUNTERS",
        CreateGeneralObject = 0xa00 => "CREATE_GENERAL_OBJECT",
        ModifyGeneralObject = 0xa01 => "MODIFY_GENERAL_OBJECT",
        QueryGeneralObject = 0xa02 => "QUERY_GENERAL_OBJECT",
        DestroyGeneralObject = 0xa03 => "DESTROY_GENERAL_OBJECT",
        CreateUctx = 0xa04 => "CREATE_UCTX",
        DestroyUctx = 0xa06 => "DESTROY_UCTX",
        CreateUmem = 0xa08 => "CREATE_UMEM",
        DestroyUmem = 0xa0a => "DESTROY_UMEM",
        SyncSteering = 0xb00 => "SYNC_STEERING",
        QueryVhcaState = 0xb0d => "QUERY_VHCA_STATE",
        ModifyVhcaState = 0xb0e => "MODIFY_VHCA_STATE",
    }
}

impl Opcode {
    /// Same as [`Opcode::from_raw`].
    #[must_use]
    pub const fn from_u16(v: u16) -> Option<Self> {
        Self::from_raw(v)
    }

    /// True for opcodes in the firmware's general range `[0xb00, 0xd00)`,
    /// which DEVX passes through as general commands.
    #[must_use]
    pub const fn in_general_range(op: u16) -> bool {
        op >= 0xb00 && op < 0xd00
    }
}

/// Name of a raw opcode, or `UNKNOWN(0x123)`.
#[must_use]
pub fn opcode_name(op: u16) -> String {
    match Opcode::from_raw(op) {
        Some(o) => o.name().to_string(),
        None => format!("UNKNOWN({op:#x})"),
    }
}

wire_enum! {
    /// Command completion status (`status` of every out mailbox).
    CmdStatus: u8 {
        Ok = 0x00 => "OK",
        IntErr = 0x01 => "INT_ERR",
        BadOp = 0x02 => "BAD_OP",
        BadParam = 0x03 => "BAD_PARAM",
        BadSysState = 0x04 => "BAD_SYS_STATE",
        BadRes = 0x05 => "BAD_RES",
        ResBusy = 0x06 => "RES_BUSY",
        Lim = 0x08 => "LIM",
        BadResState = 0x09 => "BAD_RES_STATE",
        Ix = 0x0a => "IX",
        NoRes = 0x0f => "NO_RES",
        BadQpState = 0x10 => "BAD_QP_STATE",
        BadPkt = 0x30 => "BAD_PKT",
        BadSizeOutsCqes = 0x40 => "BAD_SIZE_OUTS_CQES",
        BadInpLen = 0x50 => "BAD_INP_LEN",
        BadOutpLen = 0x51 => "BAD_OUTP_LEN",
    }
}

/// Linux errno values used by the status mapping (same on every Linux arch).
pub mod errno {
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Remote I/O error: how DEVX reports a firmware command failure.
    pub const EREMOTEIO: i32 = 121;
}

impl CmdStatus {
    /// The errno rdma-core reports for this status (0 for OK).
    #[must_use]
    pub const fn errno(self) -> i32 {
        match self {
            Self::Ok => 0,
            Self::IntErr | Self::BadSysState | Self::BadInpLen | Self::BadOutpLen => errno::EIO,
            Self::ResBusy => errno::EBUSY,
            Self::Lim => errno::ENOMEM,
            Self::NoRes => errno::EAGAIN,
            Self::BadOp
            | Self::BadParam
            | Self::BadRes
            | Self::BadResState
            | Self::Ix
            | Self::BadQpState
            | Self::BadPkt
            | Self::BadSizeOutsCqes => errno::EINVAL,
        }
    }
}

/// Name of a raw status, or `UNKNOWN(0x7)`.
#[must_use]
pub fn status_name(status: u8) -> String {
    match CmdStatus::from_raw(status) {
        Some(s) => s.name().to_string(),
        None => format!("UNKNOWN({status:#x})"),
    }
}

wire_enum! {
    /// CQE opcode (`op_own[7:4]`).
    CqeOpcode: u8 {
        Req = 0x0 => "REQ",
        RespWrImm = 0x1 => "RESP_WR_IMM",
        RespSend = 0x2 => "RESP_SEND",
        RespSendImm = 0x3 => "RESP_SEND_IMM",
        RespSendInv = 0x4 => "RESP_SEND_INV",
        ResizeCq = 0x5 => "RESIZE_CQ",
        NoPacket = 0x6 => "NO_PACKET",
        SigErr = 0xc => "SIG_ERR",
        ReqErr = 0xd => "REQ_ERR",
        RespErr = 0xe => "RESP_ERR",
        Invalid = 0xf => "INVALID",
    }
}

wire_enum! {
    /// Error CQE syndrome (byte 55 of an error CQE).
    CqeSyndrome: u8 {
        LocalLengthErr = 0x01 => "LOCAL_LENGTH_ERR",
        LocalQpOpErr = 0x02 => "LOCAL_QP_OP_ERR",
        LocalProtErr = 0x04 => "LOCAL_PROT_ERR",
        WrFlushErr = 0x05 => "WR_FLUSH_ERR",
        MwBindErr = 0x06 => "MW_BIND_ERR",
        BadRespErr = 0x10 => "BAD_RESP_ERR",
        LocalAccessErr = 0x11 => "LOCAL_ACCESS_ERR",
        RemoteInvalReqErr = 0x12 => "REMOTE_INVAL_REQ_ERR",
        RemoteAccessErr = 0x13 => "REMOTE_ACCESS_ERR",
        RemoteOpErr = 0x14 => "REMOTE_OP_ERR",
        TransportRetryExcErr = 0x15 => "TRANSPORT_RETRY_EXC_ERR",
        RnrRetryExcErr = 0x16 => "RNR_RETRY_EXC_ERR",
        RemoteAbortedErr = 0x22 => "REMOTE_ABORTED_ERR",
    }
}

wire_enum! {
    /// Send WQE opcode (ctrl segment byte 3).
    SendOpcode: u8 {
        Nop = 0x00 => "NOP",
        SendInval = 0x01 => "SEND_INVAL",
        RdmaWrite = 0x08 => "RDMA_WRITE",
        RdmaWriteImm = 0x09 => "RDMA_WRITE_IMM",
        Send = 0x0a => "SEND",
        SendImm = 0x0b => "SEND_IMM",
        Tso = 0x0e => "TSO",
        RdmaRead = 0x10 => "RDMA_READ",
        AtomicCs = 0x11 => "ATOMIC_CS",
        AtomicFa = 0x12 => "ATOMIC_FA",
        AtomicMaskedCs = 0x14 => "ATOMIC_MASKED_CS",
        AtomicMaskedFa = 0x15 => "ATOMIC_MASKED_FA",
        BindMw = 0x18 => "BIND_MW",
        Fmr = 0x19 => "FMR",
        LocalInval = 0x1b => "LOCAL_INVAL",
        ConfigCmd = 0x1f => "CONFIG_CMD",
        SetPsv = 0x20 => "SET_PSV",
        GetPsv = 0x21 => "GET_PSV",
        CheckPsv = 0x22 => "CHECK_PSV",
        Dump = 0x23 => "DUMP",
        Umr = 0x25 => "UMR",
        TagMatching = 0x28 => "TAG_MATCHING",
        EnhancedMpsw = 0x29 => "ENHANCED_MPSW",
        FlowTblAccess = 0x2c => "FLOW_TBL_ACCESS",
        AccessAso = 0x2d => "ACCESS_ASO",
        Mmo = 0x2f => "MMO",
    }
}

wire_enum! {
    /// QP state as carried in `qpc.state`.
    QpState: u8 {
        Rst = 0x0 => "RST",
        Init = 0x1 => "INIT",
        Rtr = 0x2 => "RTR",
        Rts = 0x3 => "RTS",
        Sqer = 0x4 => "SQER",
        Err = 0x6 => "ERR",
        Sqd = 0x7 => "SQD",
        Suspended = 0x9 => "SUSPENDED",
    }
}

wire_enum! {
    /// QP service type (`qpc.st`).
    QpServiceType: u8 {
        Rc = 0x0 => "RC",
        Uc = 0x1 => "UC",
        Ud = 0x2 => "UD",
        Xrc = 0x3 => "XRC",
        Dci = 0x5 => "DCI",
        Qp0 = 0x7 => "QP0",
        Qp1 = 0x8 => "QP1",
        Raw = 0x9 => "RAW",
        RegUmr = 0xc => "REG_UMR",
    }
}

wire_enum! {
    /// Capability page selector; QUERY_HCA_CAP `op_mod = cap_type << 1 | cur`.
    HcaCapType: u16 {
        General = 0x00 => "GENERAL",
        EthernetOffloads = 0x01 => "ETHERNET_OFFLOADS",
        Odp = 0x02 => "ODP",
        Atomic = 0x03 => "ATOMIC",
        Roce = 0x04 => "ROCE",
        IpoibOffloads = 0x05 => "IPOIB_OFFLOADS",
        IpoibEnhanced = 0x06 => "IPOIB_ENHANCED",
        FlowTable = 0x07 => "FLOW_TABLE",
        EswitchFlowTable = 0x08 => "ESWITCH_FLOW_TABLE",
        Eswitch = 0x09 => "ESWITCH",
        VectorCalc = 0x0b => "VECTOR_CALC",
        Qos = 0x0c => "QOS",
        Debug = 0x0d => "DEBUG",
        DevMem = 0x0f => "DEV_MEM",
        Tls = 0x11 => "TLS",
        VdpaEmulation = 0x13 => "VDPA_EMULATION",
        DevEvent = 0x14 => "DEV_EVENT",
        Ipsec = 0x15 => "IPSEC",
        Crypto = 0x1a => "CRYPTO",
        DevShampo = 0x1d => "DEV_SHAMPO",
        Macsec = 0x1f => "MACSEC",
        General2 = 0x20 => "GENERAL_2",
        PortSelection = 0x25 => "PORT_SELECTION",
        AdvVirtualization = 0x26 => "ADV_VIRTUALIZATION",
    }
}

impl HcaCapType {
    /// QUERY_HCA_CAP `op_mod` for this page: maximum (`cur = false`) or current values.
    #[must_use]
    pub const fn op_mod(self, cur: bool) -> u16 {
        ((self as u16) << 1) | cur as u16
    }
}

wire_enum! {
    /// Address family of a RoCE address table entry (`roce_l3_type`).
    RoceL3Type: u8 {
        Ipv4 = 0 => "IPV4",
        Ipv6 = 1 => "IPV6",
    }
}

impl RoceL3Type {
    /// `source_l3_address` as firmware stores it for `gid`: an IPv4 entry
    /// keeps only the four address bytes at the end (bytes 12..16), the
    /// rest zero; an IPv6 entry keeps the whole GID.
    #[must_use]
    pub fn l3_address(self, gid: &[u8; 16]) -> [u8; 16] {
        match self {
            Self::Ipv4 => {
                let mut a = [0u8; 16];
                a[12..].copy_from_slice(&gid[12..]);
                a
            }
            Self::Ipv6 => *gid,
        }
    }

    /// The GID of an entry whose `source_l3_address` is `addr`: the
    /// IPv4-mapped `::ffff:a.b.c.d` for IPv4, the address itself for IPv6.
    /// An all-zero address is an unused entry (whose `roce_l3_type` reads
    /// as IPv4) and stays the zero GID.
    #[must_use]
    pub fn gid(self, addr: &[u8; 16]) -> [u8; 16] {
        match self {
            Self::Ipv4 if addr.iter().any(|&b| b != 0) => {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(&addr[12..]);
                g
            }
            Self::Ipv4 | Self::Ipv6 => *addr,
        }
    }
}

wire_enum! {
    /// RoCE version of a RoCE address table entry (`roce_version`).
    RoceVersion: u8 {
        V1 = 0 => "V1",
        V2 = 2 => "V2",
    }
}

wire_enum! {
    /// Firmware general object types (`obj_type` of general-object commands).
    GeneralObjType: u16 {
        SwIcm = 0x0008 => "SW_ICM",
        GeneveTlvOpt = 0x000b => "GENEVE_TLV_OPT",
        EncryptionKey = 0x000c => "ENCRYPTION_KEY",
        VirtioNetQ = 0x000d => "VIRTIO_NET_Q",
        Ipsec = 0x0013 => "IPSEC",
        MatchDefiner = 0x0018 => "MATCH_DEFINER",
        VirtioQCounters = 0x001c => "VIRTIO_Q_COUNTERS",
        Sampler = 0x0020 => "SAMPLER",
        FlowMeterAso = 0x0024 => "FLOW_METER_ASO",
        Macsec = 0x0027 => "MACSEC",
        PageTrack = 0x0046 => "PAGE_TRACK",
    }
}
