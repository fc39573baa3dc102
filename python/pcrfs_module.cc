// pcrfs._pcrfs: the thin adapter between Python and fs::StoreSession (fs/store_session.h), the
// only file that includes pybind11. The Python side (python/pcrfs/store.py: Store, its file
// objects, the reopening after fork, pickling) is what users see; this module has one class,
// Session, and turns a Status into the Python exception its errno names.
//
// The GIL: every call that may wait for a disk or a server (opening, reading, a stat or a listing,
// which may read an index page or re-encode a baseline file) runs with the GIL released, so
// DataLoader threads and other Python threads read in parallel. Nothing Python-owned is touched
// while it is released: paths are copied into std::string first, a read goes into a bytes object
// this call made or into a buffer it holds a view of (Py_buffer), and the session is kept alive
// by the Python object the call was made on.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "fs/store_session.h"

namespace py = pybind11;

namespace pcrfs::python {
namespace {

// Raises the Python exception of `s`: ValueError for a bad option (InvalidArgument without an
// errno); else OSError(errno, ...), which Python turns into the subclass that errno names
// (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError; EIO stays
// OSError). A path that names nothing, or the wrong kind of thing, gets strerror and the path,
// as os.stat would; everything else the one line the daemon logs or its opening prints.
[[noreturn]] void Raise(const Status& s, const std::string& path) {
  if (s.code() == Status::Code::kInvalidArgument && s.sys_errno() == 0) {
    throw py::value_error(s.message());
  }
  const int err = s.ToErrno();
  py::object os_error = py::reinterpret_borrow<py::object>(PyExc_OSError);
  py::object exc;
  if (!path.empty() && (err == ENOENT || err == ENOTDIR || err == EISDIR || err == EINVAL)) {
    exc = os_error(err, std::strerror(err), path);
  } else {
    exc = os_error(err, s.message());
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

template <typename T>
T Check(Result<T> r, const std::string& path) {
  if (!r) Raise(r.error(), path);
  return std::move(*r);
}

// os.stat_result's ten visible fields and its float and nanosecond times, as a tuple the
// Python side hands to os.stat_result.
py::tuple StatTuple(const struct stat& st) {
  auto ns = [](const struct timespec& t) {
    return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
  };
  return py::make_tuple(st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                        st.st_size, st.st_atim.tv_sec, st.st_mtim.tv_sec, st.st_ctim.tv_sec,
                        ns(st.st_atim), ns(st.st_mtim), ns(st.st_ctim), st.st_blksize,
                        st.st_blocks);
}

class Session {
 public:
  Session(const std::string& store, const fs::StoreSession::Options& options) {
    Result<std::unique_ptr<fs::StoreSession>> opened;
    {
      py::gil_scoped_release unlocked;
      opened = fs::StoreSession::Open(store, options);
    }
    session_ = Check(std::move(opened), "");
  }

  uint64_t Resolve(const std::string& path) const {
    Result<uint64_t> ino;
    {
      py::gil_scoped_release unlocked;
      ino = session_->Resolve(path);
    }
    return Check(std::move(ino), path);
  }

  py::tuple Stat(const std::string& path) const {
    Result<struct stat> st;
    {
      py::gil_scoped_release unlocked;
      st = session_->Stat(path);
    }
    return StatTuple(Check(std::move(st), path));
  }

  py::tuple StatIno(uint64_t ino) const {
    Result<struct stat> st;
    {
      py::gil_scoped_release unlocked;
      st = session_->StatIno(ino);
    }
    return StatTuple(Check(std::move(st), ""));
  }

  // [(name, is_dir)] in the store's order.
  std::vector<std::pair<std::string, bool>> ListDir(const std::string& path) const {
    Result<std::vector<fs::StoreSession::DirEntry>> entries;
    {
      py::gil_scoped_release unlocked;
      entries = session_->ListDir(path);
    }
    std::vector<std::pair<std::string, bool>> out;
    for (fs::StoreSession::DirEntry& e : Check(std::move(entries), path)) {
      out.emplace_back(std::move(e.name), e.is_dir);
    }
    return out;
  }

  // Up to `size` bytes at `offset` of file `ino` as a new bytes object (shorter at the end).
  py::bytes Read(uint64_t ino, uint64_t offset, size_t size) const {
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (raw == nullptr) throw py::error_already_set();  // MemoryError
    Result<size_t> n;
    {
      py::gil_scoped_release unlocked;
      n = session_->Read(ino, offset, size, reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(raw)));
    }
    if (!n) {
      Py_DECREF(raw);
      Raise(n.error(), "");
    }
    if (*n != size && _PyBytes_Resize(&raw, static_cast<Py_ssize_t>(*n)) != 0) {
      throw py::error_already_set();  // raw was freed
    }
    return py::reinterpret_steal<py::bytes>(raw);
  }

  // Reads into a writable contiguous buffer (a bytearray, a memoryview of one): the count.
  size_t ReadInto(uint64_t ino, uint64_t offset, const py::buffer& buffer) const {
    Py_buffer view;
    if (PyObject_GetBuffer(buffer.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
    Result<size_t> n;
    {
      py::gil_scoped_release unlocked;
      n = session_->Read(ino, offset, static_cast<size_t>(view.len),
                         static_cast<uint8_t*>(view.buf));
    }
    PyBuffer_Release(&view);
    return Check(std::move(n), "");
  }

  // [(record, slot)] of the files `inos`, in that order.
  std::vector<std::pair<uint32_t, uint32_t>> Placements(const std::vector<uint64_t>& inos) const {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    out.reserve(inos.size());
    Status failed;
    {
      py::gil_scoped_release unlocked;
      for (uint64_t ino : inos) {
        auto p = session_->PlacementOf(ino);
        if (!p) {
          failed = p.error();
          break;
        }
        out.emplace_back(p->record, p->slot);
      }
    }
    if (!failed.ok()) Raise(failed, "");
    return out;
  }

  void FetchRecord(uint32_t record) const {
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = session_->FetchRecord(record);
    }
    if (!s.ok()) Raise(s, "");
  }

  // [bytes or OSError] of the files `inos` of record `record` (StoreSession::ReadRecord): a
  // file that cannot be read is its exception, raised when that sample is used, not the whole
  // record's.
  py::list ReadRecord(uint32_t record, const std::vector<uint64_t>& inos) const {
    std::vector<Result<std::vector<uint8_t>>> files;
    {
      py::gil_scoped_release unlocked;
      files = session_->ReadRecord(record, inos);
    }
    py::list out;
    for (auto& f : files) {
      if (f) {
        out.append(py::bytes(reinterpret_cast<const char*>(f->data()), f->size()));
        continue;
      }
      try {
        Raise(f.error(), "");
      } catch (py::error_already_set& e) {
        out.append(e.value());
      } catch (py::value_error& e) {
        out.append(py::reinterpret_borrow<py::object>(PyExc_ValueError)(e.what()));
      }
    }
    return out;
  }

  int level() const { return session_->level(); }
  const std::string& name() const { return session_->name(); }
  bool remote() const { return session_->remote(); }
  bool in_opening_process() const { return session_->InOpeningProcess(); }
  uint64_t bytes_served() const { return session_->filesystem().bytes_served(); }

 private:
  std::unique_ptr<fs::StoreSession> session_;
};

}  // namespace
}  // namespace pcrfs::python

PYBIND11_MODULE(_pcrfs, m) {
  using pcrfs::python::Session;
  m.doc() = "pcrfs stores read without a mount (the C++ side of pcrfs.Store; use that).";
  py::class_<Session>(m, "Session")
      .def(py::init<const std::string&, const pcrfs::fs::StoreSession::Options&>(),
           py::arg("store"), py::arg("options"))
      .def("resolve", &Session::Resolve, py::arg("path"))
      .def("stat", &Session::Stat, py::arg("path"))
      .def("stat_ino", &Session::StatIno, py::arg("ino"))
      .def("listdir", &Session::ListDir, py::arg("path"))
      .def("read", &Session::Read, py::arg("ino"), py::arg("offset"), py::arg("size"))
      .def("readinto", &Session::ReadInto, py::arg("ino"), py::arg("offset"), py::arg("buffer"))
      .def("placements", &Session::Placements, py::arg("inos"))
      .def("fetch_record", &Session::FetchRecord, py::arg("record"))
      .def("read_record", &Session::ReadRecord, py::arg("record"), py::arg("inos"))
      .def_property_readonly("level", &Session::level)
      .def_property_readonly("name", &Session::name)
      .def_property_readonly("remote", &Session::remote)
      .def_property_readonly("in_opening_process", &Session::in_opening_process)
      .def_property_readonly("bytes_served", &Session::bytes_served);
}
