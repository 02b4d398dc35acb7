#pragma once
// Internal to framework/io (included only by archive.cpp): how one field of a checkpoint
// record is written to and read from a Boost archive, binary or XML. Reads check every count
// and size against the bytes left before allocating.
#include <algorithm>
#include <bit>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/archive/xml_iarchive.hpp>
#include <boost/archive/xml_oarchive.hpp>
#include <boost/serialization/nvp.hpp>
#include <boost/serialization/string.hpp>
#include <charconv>
#include <limits>
#include <streambuf>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "framework/io/checkpoint_error.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor.h"

// The binary payload stores tensor bytes and integers as the host lays them out.
static_assert(std::endian::native == std::endian::little,
              "binary checkpoint payloads are little-endian; byte-swap them before porting");

namespace qat::io::detail {
namespace wire {

using qat::detail::concat;

/// An XML tag name in a zero-padded 64-byte buffer. Boost 1.74's XML reader checks an end tag
/// against the expected name by reading name[length of the tag in the file], past the end of a
/// plain literal for a longer tag; with this padding and check_xml_end_tags() it stays inside.
struct Tag {
  static constexpr std::size_t kCapacity = 64;
  char s[kCapacity] = {};
  consteval Tag(const char* name) {  // NOLINT: implicit from literals on purpose
    for (std::size_t i = 0; name[i] != '\0' && i + 1 < kCapacity; ++i) s[i] = name[i];
  }
};

/// boost::serialization::make_nvp with a padded tag (a temporary that outlives the archive call).
template <class T>
const boost::serialization::nvp<T> nvp(const Tag& tag, T& value) {
  return boost::serialization::make_nvp(tag.s, value);
}

/// Refuses XML whose end tags could be longer than a Tag holds (see Tag).
inline void check_xml_end_tags(std::string_view xml, const std::string& source) {
  for (std::size_t at = xml.find("</"); at != std::string_view::npos; at = xml.find("</", at + 2)) {
    const std::size_t end = xml.find_first_of("> \t\r\n", at + 2);
    const std::size_t len = (end == std::string_view::npos ? xml.size() : end) - (at + 2);
    if (len >= Tag::kCapacity)
      throw CheckpointError(
          source, qat::detail::concat("corrupt payload: an XML end tag is ", len, " characters long"));
  }
}

/// A read-only streambuf over the payload that knows how many bytes are left.
class PayloadBuf : public std::streambuf {
 public:
  explicit PayloadBuf(std::string_view bytes) {
    char* p = const_cast<char*>(bytes.data());  // read only: there is no put area
    setg(p, p, p + bytes.size());
  }
  std::uint64_t remaining() const { return static_cast<std::uint64_t>(egptr() - gptr()); }
  /// Bytes of the payload consumed so far: where decoding stands.
  std::uint64_t position() const { return static_cast<std::uint64_t>(gptr() - eback()); }
  std::string_view rest() const { return {gptr(), static_cast<std::size_t>(remaining())}; }
};

// At most this much of a string from the file goes into an error message, escaped.
inline std::string excerpt(std::string_view s) {
  return s.size() <= 40 ? qat::detail::printable(s) : qat::detail::printable(s.substr(0, 40)) + "...";
}

/// What records need while loading: the bytes left (to bound every count before allocating)
/// and the source for error messages. Saving uses it with `in` null.
struct Ctx {
  const PayloadBuf* in = nullptr;
  const std::string* source = nullptr;

  [[noreturn]] void fail(const std::string& problem) const {
    throw CheckpointError(*source, in ? concat("corrupt payload at byte ", in->position(), ": ", problem)
                                      : "corrupt payload: " + problem);
  }
  /// Throws unless `count` items of at least `bytes_each` bytes fit in the unread payload.
  void require_fits(std::uint64_t count, std::uint64_t bytes_each, const char* what) const {
    const std::uint64_t left = in->remaining();
    if (count > left / bytes_each)
      fail(concat(what, " ", count, " (", bytes_each, " bytes each) exceeds the ", left, " bytes left"));
  }
  /// Every record starts at class version 1; `newest` is the one this build writes. (Boost
  /// 1.74 does not reject a class version newer than the reader's.) A version a few steps ahead
  /// is a newer qat's file; far ahead (a flipped tracking or version byte) is corruption.
  void require_version(unsigned version, unsigned newest, const char* record) const {
    constexpr unsigned kPlausibleAhead = 8;
    if (version < 1) fail(concat(record, " record version 0 was never written by qat"));
    if (version > newest + kPlausibleAhead)
      fail(concat(record, " record version ", version, " was never written by qat (this build writes ",
                  newest, ")"));
    if (version > newest)
      throw CheckpointError(*source, concat(record, " record version ", version,
                                            " is newer than this build of qat reads (", newest,
                                            "); upgrade qat to read it, unless the file is corrupt"));
  }
};

template <class Ar>
inline constexpr bool kXml =
    std::is_same_v<Ar, boost::archive::xml_oarchive> || std::is_same_v<Ar, boost::archive::xml_iarchive>;
template <class Ar>
inline constexpr bool kLoading = Ar::is_loading::value;

// ---- text for the XML archive: shortest round-trip decimal (std::to_chars) ------------------

template <class T>
void append_text(std::string& out, T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

template <class T>
bool parse_text(std::string_view tok, T& v) {
  const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  return r.ec == std::errc() && r.ptr == tok.data() + tok.size();
}

/// Calls f(token) for each whitespace-separated token of `s`.
template <class F>
void for_each_token(std::string_view s, F&& f) {
  constexpr std::string_view ws = " \t\r\n";
  for (std::size_t i = s.find_first_not_of(ws); i != std::string_view::npos;) {
    const std::size_t end = std::min(s.find_first_of(ws, i), s.size());
    f(s.substr(i, end - i));
    i = s.find_first_not_of(ws, end);
  }
}

// ---- fields ---------------------------------------------------------------------------------

/// Strings: the XML archive escapes them; the binary one stores u64 length + bytes.
template <class Ar>
void text(Ar& ar, const Tag& tag, std::string& s, const Ctx& ctx) {
  if constexpr (kXml<Ar>) {
    ar& nvp(tag, s);
  } else {
    std::uint64_t n = s.size();
    ar& nvp(tag, n);
    if constexpr (kLoading<Ar>) {
      ctx.require_fits(n, 1, "string length");
      s.resize(n);
      if (n > 0) ar.load_binary(s.data(), n);
    } else if (n > 0) {
      ar.save_binary(s.data(), n);
    }
  }
}

/// Doubles: raw in binary; exact decimal text in XML (inf and nan included).
template <class Ar>
void real(Ar& ar, const Tag& tag, double& v, const Ctx& ctx) {
  if constexpr (!kXml<Ar>) {
    ar& nvp(tag, v);
  } else {
    std::string s;
    if constexpr (!kLoading<Ar>) append_text(s, v);
    ar& nvp(tag, s);
    if constexpr (kLoading<Ar>) {
      int tokens = 0;
      bool ok = true;  // exactly one token, and a number
      for_each_token(s, [&](std::string_view tok) { ok = ok && ++tokens == 1 && parse_text(tok, v); });
      if (!ok || tokens != 1) ctx.fail(concat(tag.s, " '", excerpt(s), "' is not a number"));
    }
  }
}

/// 0/1 flags (never a raw bool: an archive byte that is not 0 or 1 would be undefined behaviour).
template <class Ar>
bool flag(Ar& ar, const Tag& tag, bool value, const Ctx& ctx) {
  std::uint8_t b = value ? 1 : 0;
  ar& nvp(tag, b);
  if (b > 1) ctx.fail(concat(tag.s, " is ", unsigned(b), ", expected 0 or 1"));
  return b == 1;
}

/// An element count, checked on load against the bytes left (every item takes at least one).
template <class Ar>
std::uint64_t count(Ar& ar, std::uint64_t n, const Ctx& ctx, const char* what) {
  ar& nvp("count", n);
  if constexpr (kLoading<Ar>) ctx.require_fits(n, 1, what);
  return n;
}

/// dtype: a one-byte code in binary, its name ("float32") in XML.
template <class Ar>
void dtype_field(Ar& ar, DType& d, const Ctx& ctx) {
  constexpr int kCount = static_cast<int>(DType::Int64) + 1;
  if constexpr (kXml<Ar>) {
    std::string name(kLoading<Ar> ? "" : dtype_name(d));
    ar& nvp("dtype", name);
    if constexpr (kLoading<Ar>) {
      for (int i = 0; i < kCount; ++i)
        if (dtype_name(static_cast<DType>(i)) == name) return void(d = static_cast<DType>(i));
      ctx.fail(concat("unknown dtype '", excerpt(name), "'"));
    }
  } else {
    std::uint8_t code = static_cast<std::uint8_t>(d);
    ar& nvp("dtype", code);
    if (code >= kCount) ctx.fail(concat("unknown dtype code ", unsigned(code)));
    d = static_cast<DType>(code);
  }
}

/// Checks dims read from the file: rank, signs, and that no product of them overflows.
inline Shape checked_shape(const std::vector<std::int64_t>& dims, const Ctx& ctx) {
  if (dims.size() > static_cast<std::size_t>(Shape::kMaxDims))
    ctx.fail(concat("tensor rank ", dims.size(), " exceeds ", Shape::kMaxDims));
  std::int64_t bound = 1;
  for (std::int64_t d : dims) {
    if (d < 0) ctx.fail(concat("negative tensor dimension ", d));
    if (d > 0 && bound > std::numeric_limits<std::int64_t>::max() / d)
      ctx.fail("tensor dimensions overflow int64");
    if (d > 0) bound *= d;
  }
  return Shape(dims);
}

/// Shape: u32 rank + i64 dims in binary, "10 128" in XML.
template <class Ar>
void shape_field(Ar& ar, Shape& shape, const Ctx& ctx) {
  std::vector<std::int64_t> dims;
  if constexpr (kXml<Ar>) {
    std::string s;
    for (std::int64_t d : shape) (s.empty() ? s : s += ' '), append_text(s, d);
    ar& nvp("shape", s);
    if constexpr (!kLoading<Ar>) return;
    for_each_token(s, [&](std::string_view tok) {
      std::int64_t d = 0;
      if (dims.size() > static_cast<std::size_t>(Shape::kMaxDims) || !parse_text(tok, d))
        ctx.fail(concat("bad tensor shape '", excerpt(s), "'"));
      dims.push_back(d);
    });
  } else {
    std::uint32_t rank = static_cast<std::uint32_t>(shape.rank());
    ar& nvp("rank", rank);
    if constexpr (kLoading<Ar>)
      if (rank > static_cast<std::uint32_t>(Shape::kMaxDims))
        ctx.fail(concat("tensor rank ", rank, " exceeds ", Shape::kMaxDims));
    for (std::uint32_t i = 0; i < rank; ++i) {
      std::int64_t d = kLoading<Ar> ? 0 : shape[static_cast<int>(i)];
      ar& nvp("dim", d);
      dims.push_back(d);
    }
  }
  if constexpr (kLoading<Ar>) shape = checked_shape(dims, ctx);
}

/// Tensor data: raw bytes in binary; whitespace-separated values, 16 per line, in XML.
template <class Ar>
void data_field(Ar& ar, const std::string& name, Tensor& t_in, const Ctx& ctx) {
  // checkpoints are device-independent: a device tensor is saved from a host copy; loading
  // fills host tensors, which load_into copies to each parameter's device
  Tensor host = kLoading<Ar> ? t_in : t_in.to(Device::CPU);
  Tensor& t = kLoading<Ar> ? t_in : host;
  if constexpr (!kXml<Ar>) {
    if (t.nbytes() == 0) return;
    if constexpr (kLoading<Ar>)
      ar.load_binary(t.raw_data(), t.nbytes());
    else
      ar.save_binary(t.raw_data(), t.nbytes());
  } else {
    std::string s;
    qat::detail::dispatch_any(t.dtype(), [&]<class T>() {
      if constexpr (!kLoading<Ar>) {
        const T* p = t.data<T>();
        for (std::int64_t i = 0; i < t.numel(); ++i) {
          if (i > 0) s += i % 16 == 0 ? '\n' : ' ';
          append_text(s, p[i]);
        }
      }
      ar& nvp("data", s);
      if constexpr (kLoading<Ar>) {
        T* p = t.data<T>();
        std::int64_t i = 0;
        for_each_token(s, [&](std::string_view tok) {
          if (i == t.numel())
            ctx.fail(concat("tensor '", excerpt(name), "' has more than ", t.numel(), " values"));
          if (!parse_text(tok, p[i]))
            ctx.fail(concat("tensor '", excerpt(name), "': '", excerpt(tok), "' is not a ",
                            dtype_name(t.dtype()), " value"));
          ++i;
        });
        if (i != t.numel())
          ctx.fail(
              concat("tensor '", excerpt(name), "' has ", i, " values for ", t.numel(), " elements"));
      }
    });
  }
}

}  // namespace wire
}  // namespace qat::io::detail
