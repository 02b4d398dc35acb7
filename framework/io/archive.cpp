// The checkpoint payload as versioned Boost.Serialization records (fields: wire.h).
#include "framework/io/archive.h"

#include <boost/archive/archive_exception.hpp>
#include <boost/archive/basic_archive.hpp>
#include <boost/serialization/tracking.hpp>
#include <boost/serialization/version.hpp>
#include <set>
#include <sstream>

#include "framework/io/wire.h"

namespace qat::io::detail {
namespace wire {

// ---- records: each a class with its own BOOST_CLASS_VERSION (listed after them) -----------

/// The class version this build writes for record R (dependent on the archive type, so that it
/// is looked up where the records are used, after the versions are declared).
template <class R, class Ar>
inline constexpr unsigned version_of = boost::serialization::version<R>::value;

struct TensorRecord {
  std::string& name;
  Tensor& tensor;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<TensorRecord, Ar>, "tensor");
    text(ar, "name", name, ctx);
    DType dtype = kLoading<Ar> ? DType::Float32 : tensor.dtype();
    Shape shape = kLoading<Ar> ? Shape{} : tensor.shape();
    dtype_field(ar, dtype, ctx);
    shape_field(ar, shape, ctx);
    if constexpr (kLoading<Ar>) {
      // Allocate only what the remaining payload can actually fill.
      ctx.require_fits(static_cast<std::uint64_t>(shape.numel()), kXml<Ar> ? 1 : element_size(dtype),
                       "tensor element count");
      tensor = Tensor::empty(shape, dtype);
    }
    data_field(ar, name, tensor, ctx);
  }
};

struct TensorListRecord {
  NamedTensors& list;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<TensorListRecord, Ar>, "tensor list");
    const std::uint64_t n = count(ar, list.size(), ctx, "tensor count");
    if constexpr (kLoading<Ar>) list.clear();
    for (std::uint64_t i = 0; i < n; ++i) {
      if constexpr (kLoading<Ar>) list.emplace_back();
      TensorRecord rec{list[i].first, list[i].second, ctx};
      ar& nvp("tensor", rec);
    }
  }
};

struct GeneratorRecord {
  Generator::State& state;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<GeneratorRecord, Ar>, "generator");
    ar& nvp("s0", state.s[0]) & nvp("s1", state.s[1]) & nvp("s2", state.s[2]) & nvp("s3", state.s[3]);
    state.has_spare_normal = flag(ar, "has_spare_normal", state.has_spare_normal, ctx);
    real(ar, "spare_normal", state.spare_normal, ctx);
  }
};

template <class Ar>
void value(Ar& ar, std::string& v, const Ctx& ctx) {
  text(ar, "value", v, ctx);
}
template <class Ar>
void value(Ar& ar, double& v, const Ctx& ctx) {
  real(ar, "value", v, ctx);
}
template <class Ar>
void value(Ar& ar, std::int64_t& v, const Ctx&) {
  ar& nvp("value", v);
}
template <class Ar>
void value(Ar& ar, Generator::State& v, const Ctx& ctx) {
  GeneratorRecord rec{v, ctx};
  ar& nvp("value", rec);
}

/// A string-keyed map: count, then key/value pairs in key order.
template <class V>
struct MapRecord {
  std::map<std::string, V>& map;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<MapRecord, Ar>, "map");
    const std::uint64_t n = count(ar, map.size(), ctx, "map entry count");
    if constexpr (kLoading<Ar>) {
      map.clear();
      for (std::uint64_t i = 0; i < n; ++i) {
        std::string key;
        V v{};
        text(ar, "key", key, ctx);
        value(ar, v, ctx);
        if (!map.try_emplace(key, std::move(v)).second)
          ctx.fail(concat("duplicate map key '", excerpt(key), "'"));
      }
    } else {
      for (auto& [k, v] : map) {
        std::string key = k;
        text(ar, "key", key, ctx);
        value(ar, v, ctx);
      }
    }
  }
};

struct OptimizerRecord {
  OptimizerState& opt;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<OptimizerRecord, Ar>, "optimizer");
    text(ar, "kind", opt.kind, ctx);
    MapRecord<double> hyper{opt.hyperparameters, ctx};
    TensorListRecord state{opt.state, ctx};
    ar& nvp("hyperparameters", hyper) & nvp("state", state);
  }
};

struct TrainingRecord {
  TrainingState& st;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<TrainingRecord, Ar>, "training");
    ar& nvp("epoch", st.epoch) & nvp("global_step", st.global_step);
    MapRecord<Generator::State> gens{st.generators, ctx};
    MapRecord<std::int64_t> counters{st.counters, ctx};
    ar& nvp("generators", gens) & nvp("counters", counters);
  }
};

template <class Record, class Ar, class T>
void optional_field(Ar& ar, const Tag& flag_tag, const Tag& tag, std::optional<T>& v, const Ctx& ctx) {
  const bool present = flag(ar, flag_tag, v.has_value(), ctx);
  if constexpr (kLoading<Ar>) {
    if (present)
      v.emplace();
    else
      v.reset();
  }
  if (!present) return;
  Record rec{*v, ctx};
  ar& nvp(tag, rec);
}

struct CheckpointRecord {
  Checkpoint& ckpt;
  const Ctx& ctx;

  template <class Ar>
  void serialize(Ar& ar, unsigned version) {
    ctx.require_version(version, version_of<CheckpointRecord, Ar>, "checkpoint");
    TensorListRecord tensors{ckpt.tensors, ctx};
    MapRecord<std::string> metadata{ckpt.metadata, ctx};
    ar& nvp("tensors", tensors) & nvp("metadata", metadata);
    optional_field<OptimizerRecord>(ar, "has_optimizer", "optimizer", ckpt.optimizer, ctx);
    optional_field<TrainingRecord>(ar, "has_training", "training", ckpt.training, ctx);
  }
};

}  // namespace wire
}  // namespace qat::io::detail

// Class versions, in one place. To change a record: bump its version here, write the new
// layout, and read older files under `if (version < N)` in its serialize().
// Every record is never tracked (records are stack temporaries, never pointers).
#define QAT_IO_RECORD(T, V) \
  BOOST_CLASS_VERSION(T, V) \
  BOOST_CLASS_TRACKING(T, boost::serialization::track_never)

QAT_IO_RECORD(qat::io::detail::wire::TensorRecord, 1)
QAT_IO_RECORD(qat::io::detail::wire::TensorListRecord, 1)
QAT_IO_RECORD(qat::io::detail::wire::GeneratorRecord, 1)
QAT_IO_RECORD(qat::io::detail::wire::MapRecord<std::string>, 1)
QAT_IO_RECORD(qat::io::detail::wire::MapRecord<double>, 1)
QAT_IO_RECORD(qat::io::detail::wire::MapRecord<std::int64_t>, 1)
QAT_IO_RECORD(qat::io::detail::wire::MapRecord<qat::Generator::State>, 1)
QAT_IO_RECORD(qat::io::detail::wire::OptimizerRecord, 1)
QAT_IO_RECORD(qat::io::detail::wire::TrainingRecord, 1)
QAT_IO_RECORD(qat::io::detail::wire::CheckpointRecord, 1)

namespace qat::io::detail {
namespace {

// Boost's own archive header is left out (no_header): ours carries the archive version, and
// Boost's header reader allocates whatever string length the file claims.
constexpr unsigned kArchiveFlags = boost::archive::no_header | boost::archive::no_codecvt;

template <class OArchive>
std::string encode_with(const Checkpoint& ckpt) {
  const std::string source = "<encoder>";
  const wire::Ctx ctx{nullptr, &source};
  std::ostringstream os(std::ios::out | std::ios::binary);
  {
    OArchive ar(os, kArchiveFlags);
    wire::CheckpointRecord rec{const_cast<Checkpoint&>(ckpt), ctx};  // saving only reads it
    ar << wire::nvp("checkpoint", rec);
  }
  if constexpr (wire::kXml<OArchive>) os << '\n';
  return std::move(os).str();
}

// `src` is the istream (XML) or streambuf (binary) over the payload.
template <class IArchive, class Source>
void decode_with(Source& src, std::uint32_t version, Checkpoint& out, const wire::Ctx& ctx) {
  IArchive ar(src, kArchiveFlags);
  ar.set_library_version(boost::serialization::library_version_type(version));
  wire::CheckpointRecord rec{out, ctx};
  ar >> wire::nvp("checkpoint", rec);
}

// Names appearing twice would make load_into ambiguous.
void require_unique(const NamedTensors& list, const char* what, const wire::Ctx& ctx) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : list)
    if (!seen.insert(name).second)
      ctx.fail(qat::detail::concat(what, " '", wire::excerpt(name), "' appears twice"));
}

}  // namespace

std::uint32_t archive_version() {
  return static_cast<std::uint32_t>(boost::archive::BOOST_ARCHIVE_VERSION());
}

std::string encode_payload(const Checkpoint& ckpt, ArchiveKind kind) {
  return kind == ArchiveKind::Xml ? encode_with<boost::archive::xml_oarchive>(ckpt)
                                  : encode_with<boost::archive::binary_oarchive>(ckpt);
}

Checkpoint decode_payload(std::string_view payload, ArchiveKind kind,
                          std::uint32_t payload_archive_version, const std::string& source) {
  using qat::detail::concat;
  if (payload_archive_version < kMinArchiveVersion || payload_archive_version > archive_version())
    throw CheckpointError(
        source, concat("the payload was written with Boost.Serialization archive version ",
                       payload_archive_version, "; this build reads versions ", kMinArchiveVersion,
                       " to ", archive_version()));
  wire::PayloadBuf buf(payload);
  const wire::Ctx ctx{&buf, &source};
  Checkpoint out;
  try {
    if (kind == ArchiveKind::Xml) {
      wire::check_xml_end_tags(payload, source);
      std::istream is(&buf);
      decode_with<boost::archive::xml_iarchive>(is, payload_archive_version, out, ctx);
    } else {
      decode_with<boost::archive::binary_iarchive>(static_cast<std::streambuf&>(buf),
                                                   payload_archive_version, out, ctx);
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {  // boost::archive::archive_exception, bad_alloc, qat::Error
    // Boost reports a short read as "input stream error" (XML: "input stream error-Success"):
    // say what it means and where.
    const std::string what = e.what();
    const bool short_read = what.rfind("input stream error", 0) == 0;
    throw CheckpointError(
        source, concat("truncated or corrupt payload at byte ", buf.position(), " of ", payload.size(),
                       " (", archive_kind_name(kind), " archive: ",
                       short_read ? std::string("the data ends early or a value is malformed")
                                  : qat::detail::printable(what),
                       ")"));
  }
  const std::string_view rest = buf.rest();
  const bool only_space = rest.find_first_not_of(" \t\r\n") == std::string_view::npos;
  if (!rest.empty() && !(kind == ArchiveKind::Xml && only_space))
    ctx.fail(concat(rest.size(), " bytes left over after the checkpoint record"));
  require_unique(out.tensors, "tensor", ctx);
  if (out.optimizer) require_unique(out.optimizer->state, "optimizer state entry", ctx);
  return out;
}

}  // namespace qat::io::detail
