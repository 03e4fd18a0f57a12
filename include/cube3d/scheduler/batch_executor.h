// What the scheduler drives: the engine side of batching. The server implements it over the
// engine and the mesh stage; tests use fakes. Two ways to run:
//   static      execute(): one batch of tasks padded to a bucket runs all of its tokens;
//   continuous  admit() / step(): a running batch of slots, one token per step; tasks join free
//               slots between steps and leave as soon as their tokens are done (iteration-level
//               scheduling, as vLLM and TensorRT-LLM do).
// The scheduler decides who runs and when; the executor only executes (it holds the tensors).
// Every method is called from the scheduler's one worker thread.
//
// A DeviceFault (core/device_fault.h) thrown by execute(), admit() or step() says the device
// itself failed: the scheduler then fails every task holding device state, clears the slots and
// stops admitting for good (scheduler.h). A step that throws one need not leave the slots as
// they were (some may have retired to the mesh stage already): they are all cleared anyway.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cube3d/scheduler/task.h"

namespace cube3d {

class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;

  // --- static batching ---------------------------------------------------------------------
  // Runs `tasks` (1 <= size <= bucket) padded to `bucket` rows. Must deliver an outcome to every
  // task (succeed or fail), possibly later from another thread, and should stop early when all
  // tasks are cancelled. Exceptions escaping it fail the batch's unfinished tasks.
  virtual void execute(const std::vector<std::shared_ptr<Task>>& tasks, int64_t bucket) = 0;

  // --- continuous batching -----------------------------------------------------------------
  // Whether the methods below are implemented; a scheduler in continuous mode refuses an
  // executor without them (invalid_argument at construction).
  virtual bool supports_continuous() const { return false; }

  // Tasks holding a decode slot: admitted, tokens not all generated, not dropped. The slots are
  // the largest batch bucket's rows; the scheduler never admits past them.
  virtual int64_t active_slots() const { return 0; }

  // Encodes and prefills `tasks` (1 <= size <= free slots) into free slots: their first token
  // is chosen now (their first decoding progress), the rest come one per step(). Throwing
  // means none of `tasks` was admitted (the scheduler fails them with the error) and the
  // running slots are untouched.
  virtual void admit(const std::vector<std::shared_ptr<Task>>& tasks);

  // One decode step for every active slot, in the smallest bucket that holds them. A task whose
  // tokens are all generated leaves its slot at once (its outcome follows from the mesh
  // stage); a task found cancelled or finished leaves its slot and is failed CANCELLED (if it has
  // no outcome yet). Throwing leaves the slots as they were: the scheduler then calls
  // clear_slots() and fails those tasks with the error.
  virtual void step();

  // Frees every slot without delivering outcomes and returns the tasks that held them (after a
  // failed step, and at shutdown, where the scheduler delivers their outcomes).
  virtual std::vector<std::shared_ptr<Task>> clear_slots();
};

}  // namespace cube3d
