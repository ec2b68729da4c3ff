// The demo's MHAttention model (examples/stock_attention) trained data-parallel over MPI: every process
// loads the same data and builds the same model, and fit splits each batch of 32 windows over the ranks.
//
//   mpirun -np 2 ./examples/distributed_stock [--epochs N] [CSV]
//   (as root: mpirun --allow-run-as-root ..., or OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
//
// Rank 0 prints the progress bar and the test MSE; run with -np 1 it trains exactly as one process does,
// and with -np 2 it reaches the same test MSE (the gradient of a batch is the same sum, split in two).
#include <kiln/distributed/context.hpp>
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "../stock_attention/stock_data.hpp"

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

int main(int argc, char** argv) {
  kiln::distributed::Context context(argc, argv);  // MPI_Init: rank and size of the mpirun job
  int epochs = 60;
  std::string path = KILN_DATA_DIR "/eu_stock_markets.csv";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0 && i + 1 < argc)
      epochs = std::stoi(argv[++i]);
    else
      path = argv[i];
  }
  try {
    const stock::Dataset data = stock::load(path);
    kiln::Model model = stock::attention_model();
    model.compile(kiln::create_optimizer("adam", {{"learning_rate", 1e-3}}), "mse");
    kiln::EarlyStopping::Options stopping;
    stopping.patience = 8;
    stopping.restore_best_weights = true;
    // The same options on every rank; batch_size is the global batch. Rank 0's initial weights are the
    // ones every rank starts from.
    model.fit(data.train_x, data.train_y,
              kiln::FitOptions()
                  .epochs(epochs)
                  .batch_size(32)
                  .validation_data(data.validation_x, data.validation_y)
                  .seed(1)
                  .verbose(2)
                  .callback(std::make_shared<kiln::EarlyStopping>(stopping))
                  .distribute(context));
    const double mse = model.evaluate(data.test_x, data.test_y).at("loss");
    if (context.is_chief()) std::printf("ranks %d, test MSE %.6f\n", context.size(), mse);
  } catch (const kiln::Error& error) {
    // A failure inside fit reached every rank; one outside it (the data on one machine) did not, so the job
    // is ended rather than leaving the other ranks waiting.
    std::fprintf(stderr, "distributed_stock rank %d: %s\n", context.rank(), error.what());
    context.abort(1);
  }
  return 0;
}
